/* braid_comm_set_timeout / braid_comm_get_timeout: argument checks, the value a split child
 * starts with, and a stopped rank timing out after the communicator's timeout rather than
 * BRAID_TIMEOUT's. */
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(timeout, .timeout = 60);

static int checks(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    double t = 0;
    MP_OK(rank, braid_comm_get_timeout(comm, &t));
    MP_CHECK(rank, t == 300, "default timeout %g, expected BRAID_TIMEOUT's 300", t);
    const double bad[] = {0, -1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        braid_result_t r = braid_comm_set_timeout(comm, bad[i]);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "timeout_s"),
                 "set_timeout(%g) -> %s (%s)", bad[i], braid_strerror(r), braid_last_error());
    }
    MP_CHECK(rank, braid_comm_set_timeout(NULL, 1) == BRAID_ERR_INVALID_ARG, "NULL comm");
    MP_CHECK(rank, braid_comm_get_timeout(comm, NULL) == BRAID_ERR_INVALID_ARG, "NULL out");
    double v = 7.25 + rank;
    MP_OK(rank, braid_comm_set_timeout(comm, v));
    MP_OK(rank, braid_comm_get_timeout(comm, &t));
    MP_CHECK(rank, t == v, "timeout %g after setting %g", t, v);
    /* a pending non-blocking operation refuses the change */
    float buf[1024];
    for (int i = 0; i < 1024; i++)
        buf[i] = (float)(rank * 1024 + i);
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(buf, buf, 1024, BRAID_FLOAT32, BRAID_SUM, comm, &req));
    braid_result_t r = braid_comm_set_timeout(comm, 3);
    MP_OK(rank, braid_wait(req));
    MP_CHECK(rank, r == BRAID_SUCCESS || r == BRAID_ERR_INVALID_USAGE, "%s", braid_strerror(r));
    if (r == BRAID_ERR_INVALID_USAGE) {
        MP_CHECK(rank, strstr(braid_last_error(), "pending"), "%s", braid_last_error());
        MP_OK(rank, braid_comm_get_timeout(comm, &t));
        MP_CHECK(rank, t == v, "a refused set changed the timeout to %g", t);
    }
    MP_OK(rank, braid_comm_set_timeout(comm, v));
    braid_comm_t child = NULL;
    MP_OK(rank, braid_comm_split(comm, rank % 2, rank, &child));
    MP_OK(rank, braid_comm_get_timeout(child, &t));
    MP_CHECK(rank, t == v, "split child starts with %g, parent has %g", t, v);
    braid_comm_destroy(child);
    (void)n;
    return 0;
}

Test(timeout, set_get_checks_and_split_inherits)
{
    setenv("BRAID_TIMEOUT", "300", 1);
    for (int n = 1; n <= 3; n++)
        cr_assert_eq(mp_run(n, checks, NULL, 30), 0, "n=%d", n);
}

/* BRAID_TIMEOUT is 300 s, the communicator's 1.5 s: a stopped rank gives BRAID_ERR_TIMEOUT
 * naming it within a few seconds. */
static int stopped(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    MP_OK(rank, braid_comm_set_timeout(comm, 1.5));
    size_t count = 1 << 14;
    float *buf = calloc(count, sizeof(float));
    braid_result_t res = BRAID_SUCCESS;
    double t_fail = 0;
    for (int it = 0; it < 1000000 && res == BRAID_SUCCESS; it++) {
        if (rank == 2 && it == 10) raise(SIGSTOP);
        double t0 = proc_now_s();
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
        t_fail = proc_now_s() - t0;
    }
    free(buf);
    const char *m = braid_last_error();
    MP_CHECK(rank, res == BRAID_ERR_TIMEOUT || res == BRAID_ERR_REMOTE, "got %s (%s)",
             braid_strerror(res), m);
    MP_CHECK(rank, t_fail < 8, "the failing call took %.2f s (comm timeout 1.5 s)", t_fail);
    if (rank == 0) MP_CHECK(rank, res == BRAID_ERR_TIMEOUT && strstr(m, "rank 2"), "%s", m);
    return 0;
}

Test(timeout, comm_timeout_overrides_env)
{
    setenv("BRAID_TIMEOUT", "300", 1);
    mp_job_t job;
    mp_start(&job, 3, stopped, NULL);
    int st0, st1;
    waitpid(job.pids[0], &st0, 0);
    waitpid(job.pids[1], &st1, 0);
    kill(job.pids[2], SIGKILL);
    waitpid(job.pids[2], NULL, 0);
    cr_assert(WIFEXITED(st0) && WEXITSTATUS(st0) == 0, "rank 0 did not time out naming rank 2");
    cr_assert(WIFEXITED(st1) && WEXITSTATUS(st1) == 0, "rank 1 did not fail cleanly");
}

/* A timeout beyond any wait (1e12 s by braid_comm_set_timeout, 1e11 s by BRAID_TIMEOUT) is
 * taken as the longest one, 1e9 s (about 32 years): converted to nanoseconds as it was, it
 * overflowed (every wait timed out at once) or wrapped the deadline (waits spun). Rank 1
 * arrives 100 ms late at each call (all-reduces of two sizes, a 4 MiB send/recv), which must
 * succeed; get_timeout gives 1e9. */
static int huge(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    if (arg) MP_OK(rank, braid_comm_set_timeout(comm, *(const double *)arg));
    size_t count = 1 << 20;
    float *buf = calloc(count, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    const size_t sizes[] = {1024, count};
    for (int i = 0; i < 2; i++) {
        for (size_t k = 0; k < sizes[i]; k++)
            buf[k] = (float)(rank + 1 + (int)(k % 7));
        if (rank == 1) usleep(100000);
        MP_OK(rank, braid_allreduce(buf, buf, sizes[i], BRAID_FLOAT32, BRAID_SUM, comm));
        for (size_t k = 0; k < sizes[i]; k++)
            MP_CHECK(rank, buf[k] == (float)(3 + 2 * (int)(k % 7)), "all-reduce of %zu: [%zu] = %g",
                     sizes[i], k, (double)buf[k]);
    }
    if (rank == 0) {
        for (size_t k = 0; k < count; k++)
            buf[k] = (float)(k % 1000);
        MP_OK(rank, braid_send(buf, count, BRAID_FLOAT32, 1, comm));
    } else {
        usleep(100000);
        memset(buf, 0, count * sizeof(float));
        MP_OK(rank, braid_recv(buf, count, BRAID_FLOAT32, 0, comm));
        for (size_t k = 0; k < count; k++)
            MP_CHECK(rank, buf[k] == (float)(k % 1000), "recv: [%zu] = %g", k, (double)buf[k]);
    }
    free(buf);
    double t = 0;
    MP_OK(rank, braid_comm_get_timeout(comm, &t));
    MP_CHECK(rank, t == 1e9, "timeout %g, expected the longest, 1e9", t);
    return 0;
}

Test(timeout, huge_timeouts_are_the_longest_not_none)
{
    double set = 1e12;
    setenv("BRAID_TIMEOUT", "300", 1);
    cr_expect_eq(mp_run(2, huge, &set, 30), 0, "braid_comm_set_timeout(1e12) (see stderr)");
    setenv("BRAID_TIMEOUT", "1e11", 1);
    cr_expect_eq(mp_run(2, huge, NULL, 30), 0, "BRAID_TIMEOUT=1e11 (see stderr)");
    setenv("BRAID_TIMEOUT", "0", 1);
    cr_expect_eq(mp_run(2, huge, NULL, 30), 0, "BRAID_TIMEOUT=0 (see stderr)");
}
