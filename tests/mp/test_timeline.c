/* BRAID_TRACE as real processes: every rank's calls, the ring's steps and the send/recv
 * operations end up in one Chrome trace written by rank 0 at destroy (shm and tcp, 1..4
 * ranks); a hierarchical all-reduce shows its sub-communicators' rows; a communicator that
 * failed before destroy leaves one file per rank. tests/mp/check_trace.py reads the JSON
 * and checks the events against the calls made here. */
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int traced_calls(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float *a = malloc(1000 * 4), *b = malloc(1000 * 4);
    int32_t *c = malloc(777 * 4);
    double *s = malloc(5000 * 8), *r = malloc(5000 * 8);
    uint8_t *x = malloc(300 * (size_t)n), *y = malloc(300 * (size_t)n);
    MP_CHECK(rank, a && b && c && s && r && x && y, "malloc");
    data_fill(a, BRAID_FLOAT32, BRAID_SUM, rank, 0, 1000, 1);
    MP_OK(rank, braid_allreduce(a, b, 1000, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, 1000, 1, "allreduce"),
             "allreduce result");
    data_fill(c, BRAID_INT32, BRAID_SUM, rank, 0, 777, 2);
    MP_OK(rank, braid_broadcast(c, c, 777, BRAID_INT32, n - 1, comm));
    MP_CHECK(rank, !data_check_rank(c, BRAID_INT32, BRAID_SUM, n - 1, 0, 777, 2, "bcast"),
             "broadcast result");
    if (n > 1) {
        data_fill(s, BRAID_FLOAT64, BRAID_SUM, rank, 0, 5000, 3);
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_send(s, 5000, BRAID_FLOAT64, (rank + 1) % n, comm));
        MP_OK(rank, braid_recv(r, 5000, BRAID_FLOAT64, (rank + n - 1) % n, comm));
        MP_OK(rank, braid_group_end());
        MP_CHECK(
            rank,
            !data_check_rank(r, BRAID_FLOAT64, BRAID_SUM, (rank + n - 1) % n, 0, 5000, 3, "recv"),
            "received data");
    }
    for (int i = 0; i < 300 * n; i++)
        x[i] = (uint8_t)(rank * 31 + i);
    MP_OK(rank, braid_alltoall(x, y, 300, BRAID_UINT8, comm));
    for (int p = 0; p < n; p++)
        for (int i = 0; i < 300; i++)
            MP_CHECK(rank, y[p * 300 + i] == (uint8_t)(p * 31 + rank * 300 + i),
                     "alltoall block %d [%d]", p, i);
    free(a);
    free(b);
    free(c);
    free(s);
    free(r);
    free(x);
    free(y);
    return 0;
}

static int aborted_after_allreduce(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float a[64], b[64];
    data_fill(a, BRAID_FLOAT32, BRAID_SUM, rank, 0, 64, 4);
    MP_OK(rank, braid_allreduce(a, b, 64, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, 64, 4, "allreduce"),
             "allreduce result");
    MP_OK(rank, braid_barrier(comm));
    MP_OK(rank, braid_comm_abort(comm)); /* the harness's destroy then cannot gather */
    return 0;
}

static int direct_allreduce(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = 300007; /* several blocks of BRAID_DIRECT_BLOCK */
    float *a = malloc(count * 4), *b = malloc(count * 4);
    MP_CHECK(rank, a && b, "malloc");
    data_fill(a, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 6);
    MP_OK(rank, braid_allreduce(a, b, count, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 6, "direct"),
             "direct allreduce result");
    free(a);
    free(b);
    return 0;
}

static int hier_allreduce(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank / 2, "hier");
    MP_CHECK(rank, c, "fake-host communicator");
    size_t count = 100003;
    float *a = malloc(count * 4), *b = malloc(count * 4);
    MP_CHECK(rank, a && b, "malloc");
    data_fill(a, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 5);
    MP_OK(rank, braid_allreduce(a, b, count, BRAID_FLOAT32, BRAID_SUM, c));
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 5, "hier"),
             "hier allreduce result");
    MP_OK(rank, braid_comm_destroy(c));
    free(a);
    free(b);
    return 0;
}

/* Runs fn on n ranks with BRAID_TRACE set, then the checker on what they wrote. */
static void run_traced(const char *profile, int n, mp_fn_t fn, const char *transport,
                       const char *algo)
{
    char dir[] = "/tmp/braid-trace-XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp");
    char path[128];
    snprintf(path, sizeof(path), "%s/job.json", dir);
    setenv("BRAID_TRACE", path, 1);
    if (transport) setenv("BRAID_TRANSPORT", transport, 1);
    if (algo) setenv("BRAID_ALGO", algo, 1);
    int bad = mp_run(n, fn, NULL, 60);
    unsetenv("BRAID_TRACE");
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_ALGO");
    cr_assert_eq(bad, 0, "%d rank(s) failed (%s, n=%d)", bad, profile, n);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "python3 %s/tests/mp/check_trace.py %s %s %d", BRAID_SOURCE_DIR,
             profile, path, n);
    int rc = system(cmd);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    cr_assert_eq(rc, 0, "%s: the trace check failed (%s, n=%d, %s)", profile, path, n,
                 transport ? transport : "shm");
}

Test(timeline, calls_and_steps_shm, .timeout = 120)
{
    for (int n = 1; n <= 4; n++)
        run_traced("calls", n, traced_calls, NULL, "ring");
}

Test(timeline, calls_and_steps_tcp, .timeout = 120)
{
    run_traced("calls", 3, traced_calls, "tcp", "ring");
}

Test(timeline, failed_communicator_writes_per_rank_files, .timeout = 60)
{
    run_traced("fallback", 3, aborted_after_allreduce, NULL, NULL);
}

Test(timeline, direct_blocks, .timeout = 60)
{
    setenv("BRAID_DIRECT_BLOCK", "262144", 1);
    run_traced("direct", 3, direct_allreduce, NULL, "direct");
    unsetenv("BRAID_DIRECT_BLOCK");
}

Test(timeline, hierarchical_sub_communicators, .timeout = 120)
{
    run_traced("hier", 4, hier_allreduce, NULL, NULL);
}
