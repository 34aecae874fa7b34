/* A group's small all-reduces fused into one call (src/core/group_fuse.c), as real processes:
 * every dtype x op with counts 0, 1 and primes, in place and out, unaligned, runs broken by a
 * large call, a broadcast and sends/receives between them, each output checked against the
 * independent reference (tests/common/data.c); a call that reads an earlier call's output on
 * one rank only (that rank cannot pack: every rank runs the calls one by one); calls whose
 * counts differ between ranks but add up alike (a mismatch, not a silent exchange of
 * elements), on one host and on fake hosts under the hierarchical all-reduce; fused calls over
 * tcp. */
#include "data.h"
#include "fuselog.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NCALLS = 9 };

typedef struct {
    size_t count;
    int in_place;
    size_t off; /* bytes past an aligned start */
} call_t;

/* Counts in bytes stay under the per-call bound (a quarter of 64 KiB) except call 5 for 4- and
 * 8-byte dtypes, which runs alone there; the broadcast before call 7 ends a run. So a group
 * fuses calls 0-6 and 7-8 (1- and 2-byte dtypes) or 0-4 and 7-8 (expected_runs). */
static const call_t calls[NCALLS] = {{0, 0, 0},    {1, 0, 0}, {7, 1, 0},  {13, 0, 1}, {101, 0, 0},
                                     {4099, 1, 3}, {3, 0, 0}, {64, 1, 0}, {2, 0, 5}};

static int one_group(braid_comm_t comm, int rank, int n, braid_datatype_t dt, braid_redop_t op)
{
    size_t es = braid_dtype_size(dt);
    char *sbase[NCALLS], *rbase[NCALLS];
    void *send[NCALLS], *recv[NCALLS];
    for (int c = 0; c < NCALLS; c++) {
        size_t bytes = calls[c].count * es;
        sbase[c] = data_xmalloc(bytes);
        rbase[c] = data_xmalloc(bytes);
        recv[c] = rbase[c] + calls[c].off;
        memset(recv[c], 0x5a, bytes);
        send[c] = calls[c].in_place ? recv[c] : sbase[c] + calls[c].off;
        data_fill(send[c], dt, op, rank, 0, calls[c].count, 100 + c);
    }
    /* A broadcast and a send/receive pair between the all-reduces. */
    int32_t bc[3] = {rank, rank, rank}, ring_out[4] = {-1, -1, -1, -1}, ring_in[4];
    for (int i = 0; i < 4; i++)
        ring_in[i] = rank * 10 + i;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    MP_OK(rank, braid_group_start());
    for (int c = 0; c < NCALLS; c++) {
        if (c == 3) MP_OK(rank, braid_send(ring_in, 4, BRAID_INT32, next, comm));
        if (c == 4) MP_OK(rank, braid_recv(ring_out, 4, BRAID_INT32, prev, comm));
        if (c == 7) MP_OK(rank, braid_broadcast(bc, bc, 3, BRAID_INT32, n - 1, comm));
        MP_OK(rank, braid_allreduce(send[c], recv[c], calls[c].count, dt, op, comm));
    }
    MP_OK(rank, braid_group_end());
    int bad = 0;
    for (int c = 0; c < NCALLS; c++) {
        char what[64];
        snprintf(what, sizeof(what), "%s op %d call %d", braid_dtype_name(dt), (int)op, c);
        bad |= data_check_reduced(recv[c], dt, op, n, 0, calls[c].count, 100 + c, what) != 0;
        free(sbase[c]);
        free(rbase[c]);
    }
    MP_CHECK(rank, !bad, "%s op %d: wrong all-reduce results (above)", braid_dtype_name(dt),
             (int)op);
    for (int i = 0; i < 4; i++)
        MP_CHECK(rank, ring_out[i] == prev * 10 + i, "received %d from rank %d at %d", ring_out[i],
                 prev, i);
    MP_CHECK(rank, bc[0] == n - 1 && bc[2] == n - 1, "broadcast gave %d", bc[0]);
    return 0;
}

static int every_dtype_op(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < BRAID_NUM_OPS; op++)
            if (one_group(comm, rank, n, (braid_datatype_t)dt, (braid_redop_t)op)) return 1;
    return 0;
}

/* The fused runs every_dtype_op makes on each rank, from the rule (group_fuse.c): integer
 * averages never fuse; *calls gets the calls fused in all. */
static int expected_runs(int *calls)
{
    int runs = 0;
    *calls = 0;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < BRAID_NUM_OPS; op++) {
            int is_float = dt >= BRAID_FLOAT16;
            if (op == BRAID_AVG && !is_float) continue;
            size_t es = braid_dtype_size((braid_datatype_t)dt);
            runs += 2;
            *calls += (4099 * es <= 16384 ? 7 : 5) + 2;
        }
    return runs;
}

Test(group_fuse, every_dtype_and_op_against_the_reference, .timeout = 240)
{
    int want_calls = 0, want_runs = expected_runs(&want_calls);
    for (int n = 1; n <= 4; n++) {
        char dir[32];
        cr_assert_eq(fuselog_start(dir), 0);
        cr_expect_eq(mp_run(n, every_dtype_op, NULL, 120), 0, "n=%d (see stderr)", n);
        static const char *const what[1] = {" allreduces fused"};
        int lines, calls, files = fuselog_count(dir, what, 1, &lines, &calls);
        cr_expect_eq(files, n, "n=%d: %d log files", n, files);
        /* one rank: nothing to fuse; else every rank fuses every run */
        cr_expect_eq(lines, n > 1 ? n * want_runs : 0, "n=%d: %d fused runs", n, lines);
        cr_expect_eq(calls, n > 1 ? n * want_calls : 0, "n=%d: %d calls fused", n, calls);
    }
}

Test(group_fuse, every_dtype_and_op_over_tcp, .timeout = 240)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, every_dtype_op, NULL, 120), 0, "see stderr");
}

/* Rank 1's second call reduces the first call's output (y = sum x, then z = sum y); the others
 * pass a buffer that already holds sum x. Every rank must then get z = n * sum x: rank 1
 * cannot pack y before the first call ran, so the group runs its calls one by one. */
static int chained(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 37 };
    int32_t x[K], y[K], other[K], z[K], want[K];
    data_fill(x, BRAID_INT32, BRAID_SUM, rank, 0, K, 7);
    for (int i = 0; i < K; i++) {
        data_expected(&want[i], BRAID_INT32, BRAID_SUM, n, (size_t)i, 7);
        y[i] = z[i] = -12345;
        other[i] = want[i];
    }
    const int32_t *second = rank == 1 ? y : other;
    for (int round = 0; round < 2; round++) { /* the calls in place the second time */
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_allreduce(x, y, K, BRAID_INT32, BRAID_SUM, comm));
        MP_OK(rank, braid_allreduce(second, z, K, BRAID_INT32, BRAID_SUM, comm));
        MP_OK(rank, braid_group_end());
        for (int i = 0; i < K; i++) {
            MP_CHECK(rank, y[i] == want[i], "round %d: y[%d] = %d, want %d", round, i, y[i],
                     want[i]);
            MP_CHECK(rank, z[i] == n * want[i], "round %d: z[%d] = %d, want %d", round, i, z[i],
                     n * want[i]);
        }
        data_fill(x, BRAID_INT32, BRAID_SUM, rank, 0, K, 7);
        data_fill(y, BRAID_INT32, BRAID_SUM, rank, 0, K, 7);
        for (int i = 0; i < K; i++)
            z[i] = rank == 1 ? -1 : want[i];
        /* in place: y = sum y (= sum x), then z (rank 1: y) = sum z */
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_allreduce(y, y, K, BRAID_INT32, BRAID_SUM, comm));
        MP_OK(rank, braid_allreduce(rank == 1 ? y : z, z, K, BRAID_INT32, BRAID_SUM, comm));
        MP_OK(rank, braid_group_end());
        for (int i = 0; i < K; i++)
            MP_CHECK(rank, z[i] == n * want[i], "in place, round %d: z[%d] = %d, want %d", round, i,
                     z[i], n * want[i]);
        for (int i = 0; i < K; i++)
            y[i] = z[i] = -12345;
    }
    return 0;
}

Test(group_fuse, a_call_reading_an_earlier_output_on_one_rank, .timeout = 120)
{
    for (int n = 2; n <= 4; n++)
        cr_expect_eq(mp_run(n, chained, NULL, 60), 0, "n=%d (see stderr)", n);
}

/* Rank 0 calls all-reduces of 3 then 5 elements, the others 5 then 3: the same total. Under
 * the hierarchical all-reduce a stage (reduce_scatter, allgather) must find it: counted. */
typedef struct {
    const char *algo;
    atomic_int *stage_found;
} swap_arg_t;

static int swapped_counts(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const swap_arg_t *sa = arg;
    const char *algo = sa->algo;
    braid_comm_t c = comm;
    if (algo) {
        c = mp_fake_host_comm(comm, rank, rank % 2, algo);
        MP_CHECK(rank, c, "no fake-host communicator");
    }
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
    /* hier's first call checks the ranks' descriptors before it sets up its stages (and would
     * find the mismatch there): one call first, so the stages meet it. */
    if (algo) MP_OK(rank, braid_allreduce(a, b, 8, BRAID_FLOAT32, BRAID_SUM, c));
    size_t first = rank == 0 ? 3 : 5;
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_allreduce(a, b, first, BRAID_FLOAT32, BRAID_SUM, c));
    MP_OK(rank, braid_allreduce(a + first, b + first, 8 - first, BRAID_FLOAT32, BRAID_SUM, c));
    braid_result_t r = braid_group_end();
    const char *msg = braid_last_error();
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE, "group end returned %s: %s",
             braid_strerror(r), msg);
    if (r == BRAID_ERR_MISMATCH)
        MP_CHECK(rank, strstr(msg, "2 calls fused"),
                 "the message does not name the fused calls: %s", msg);
    if (r == BRAID_ERR_MISMATCH && (strstr(msg, "reduce_scatter #") || strstr(msg, "allgather #")))
        atomic_fetch_add(sa->stage_found, 1);
    if (algo) braid_comm_destroy(c);
    return 0;
}

Test(group_fuse, counts_that_add_up_alike_are_a_mismatch, .timeout = 120)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    atomic_int *found =
        mmap(NULL, sizeof(*found), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(found != MAP_FAILED);
    atomic_init(found, 0);
    swap_arg_t flat = {NULL, found}, hier = {"hier", found};
    cr_expect_eq(mp_run(2, swapped_counts, &flat, 60), 0, "2 ranks (see stderr)");
    cr_expect_eq(mp_run(3, swapped_counts, &flat, 60), 0, "3 ranks (see stderr)");
    cr_expect_eq(atomic_load(found), 0, "a stage of hier found a flat mismatch");
    cr_expect_eq(mp_run(4, swapped_counts, &hier, 60), 0, "4 ranks, hier (see stderr)");
    cr_expect_gt(atomic_load(found), 0, "no rank saw the layouts differ in a stage of hier");
    munmap(found, sizeof(*found));
}

/* The hierarchical all-reduce (2 fake hosts) runs fused calls; checked as above. */
static int hier_fused(braid_comm_t comm, int rank, int n, void *arg)
{
    braid_comm_t c = mp_fake_host_comm(comm, rank, rank % 2, arg);
    MP_CHECK(rank, c, "no fake-host communicator");
    int rc = one_group(c, rank, n, BRAID_FLOAT32, BRAID_SUM) ||
             one_group(c, rank, n, BRAID_INT64, BRAID_MAX) ||
             one_group(c, rank, n, BRAID_BFLOAT16, BRAID_AVG);
    braid_comm_destroy(c);
    return rc;
}

Test(group_fuse, fused_calls_under_the_hierarchical_allreduce, .timeout = 120)
{
    cr_expect_eq(mp_run(4, hier_fused, "hier", 60), 0, "hier (see stderr)");
    cr_expect_eq(mp_run(4, hier_fused, "", 60), 0, "the cost model's choice (see stderr)");
}
