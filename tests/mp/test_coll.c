/* Collectives as real processes (n = 1..8, oversubscribed on small machines): every dtype x op,
 * counts 0, 1, 7, n-1, n+1, primes, a large prime and 64 MiB, unaligned buffers, in place and
 * out of place, every root. Inputs depend on (rank, index, seed); results are compared
 * bit-exactly with an independent reference (tests/common/data.c). */
#include "data.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct {
    int big; /* also run the large counts */
    int unaligned;
} opts_t;

static int allreduce_matrix(braid_comm_t comm, int rank, int n, void *arg)
{
    const opts_t *o = arg;
    size_t counts[] = {
        0, 1, 7, (size_t)(n > 1 ? n - 1 : 2), (size_t)n + 1, 1009, data_quick() ? 16411 : 65537};
    int seed = 1;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < BRAID_NUM_OPS; op++)
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
                for (int ip = 0; ip < 2; ip++) {
                    size_t off = o->unaligned && (ci & 1) ? 1 + (size_t)dt % 3 : 0;
                    if (data_check_allreduce(comm, rank, n, dt, op, counts[ci], ip, off, seed++,
                                             "coll"))
                        return 1;
                }
    if (o->big) {
        if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, 1000003, 0, 0, 7, "coll"))
            return 1;
        size_t big = data_quick() ? (1u << 20) / 4 : (64u << 20) / 4;
        if (data_check_allreduce(comm, rank, n, BRAID_FLOAT32, BRAID_SUM, big, 1, 0, 8, "coll"))
            return 1;
    }
    return 0;
}

static int rooted_and_ring(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t counts[] = {0, 1, 7, (size_t)n + 1, 4099, data_quick() ? 16411 : 100003};
    int seed = 100;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        size_t count = counts[ci];
        for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
            size_t es = braid_dtype_size(dt);
            size_t big = count * (size_t)n * es;
            char *in = data_xmalloc(big + 8), *out = data_xmalloc(big + 8);
            char what[128];
            for (int root = 0; root < n; root++) {
                /* the sanitizer pass: roots 0, n / 2 and n - 1 (the first, a middle one and the
                 * last: the chain's and tree's shapes around them) */
                if (data_quick() && root != 0 && root != n / 2 && root != n - 1) continue;
                /* broadcast: only the root's sendbuf matters */
                data_fill(in, dt, BRAID_SUM, rank, 0, count, seed);
                memset(out, 0xCD, count * es);
                snprintf(what, sizeof(what), "broadcast n=%d root=%d %s count=%zu", n, root,
                         braid_dtype_name(dt), count);
                MP_OK(rank, braid_broadcast(in, out, count, dt, root, comm));
                MP_CHECK(rank, !data_check_rank(out, dt, BRAID_SUM, root, 0, count, seed, what),
                         "%s", what);
                /* in-place broadcast */
                data_fill(out, dt, BRAID_SUM, rank, 0, count, seed + 1);
                MP_OK(rank, braid_broadcast(out, out, count, dt, root, comm));
                MP_CHECK(rank, !data_check_rank(out, dt, BRAID_SUM, root, 0, count, seed + 1, what),
                         "%s in place", what);
                /* reduce: every op (sum and max only at the largest count, for time) */
                for (int op = 0; op < BRAID_NUM_OPS; op++) {
                    if (count > 10000 && op != BRAID_SUM && op != BRAID_MAX) continue;
                    data_fill(in, dt, op, rank, 0, count, seed);
                    snprintf(what, sizeof(what), "reduce n=%d root=%d %s %s count=%zu", n, root,
                             braid_dtype_name(dt), braid_op_name(op), count);
                    MP_OK(rank, braid_reduce(in, out, count, dt, op, root, comm));
                    if (rank == root)
                        MP_CHECK(rank, !data_check_reduced(out, dt, op, n, 0, count, seed, what),
                                 "%s", what);
                }
            }
            for (int op = 0; op < BRAID_NUM_OPS; op++) {
                /* reduce_scatter: sendbuf holds n blocks of count */
                data_fill(in, dt, op, rank, 0, count * (size_t)n, seed);
                snprintf(what, sizeof(what), "reduce_scatter n=%d %s %s count=%zu", n,
                         braid_dtype_name(dt), braid_op_name(op), count);
                MP_OK(rank, braid_reduce_scatter(in, out, count, dt, op, comm));
                MP_CHECK(
                    rank,
                    !data_check_reduced(out, dt, op, n, (size_t)rank * count, count, seed, what),
                    "%s", what);
                /* in place: recvbuf is the rank's slot inside sendbuf */
                data_fill(in, dt, op, rank, 0, count * (size_t)n, seed);
                char *slot = in + (size_t)rank * count * es;
                MP_OK(rank, braid_reduce_scatter(in, slot, count, dt, op, comm));
                MP_CHECK(
                    rank,
                    !data_check_reduced(slot, dt, op, n, (size_t)rank * count, count, seed, what),
                    "%s in place", what);
            }
            /* allgather: rank r's block = r's inputs */
            data_fill(in, dt, BRAID_SUM, rank, 0, count, seed);
            snprintf(what, sizeof(what), "allgather n=%d %s count=%zu", n, braid_dtype_name(dt),
                     count);
            MP_OK(rank, braid_allgather(in, out, count, dt, comm));
            for (int b = 0; b < n; b++)
                MP_CHECK(rank,
                         !data_check_rank(out + (size_t)b * count * es, dt, BRAID_SUM, b, 0, count,
                                          seed, what),
                         "%s block %d", what, b);
            data_fill(out + (size_t)rank * count * es, dt, BRAID_SUM, rank, 0, count, seed);
            MP_OK(rank, braid_allgather(out + (size_t)rank * count * es, out, count, dt, comm));
            for (int b = 0; b < n; b++)
                MP_CHECK(rank,
                         !data_check_rank(out + (size_t)b * count * es, dt, BRAID_SUM, b, 0, count,
                                          seed, what),
                         "%s in place block %d", what, b);
            free(in);
            free(out);
            seed++;
        }
        MP_OK(rank, braid_barrier(comm));
    }
    return 0;
}

static int nonblocking(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 6 };
    size_t counts[K] = {1, 100, 7777, 1 << 16, 3, 250001};
    float *bufs[K];
    braid_request_t reqs[K];
    for (int k = 0; k < K; k++) {
        bufs[k] = data_xmalloc(counts[k] * sizeof(float));
        data_fill(bufs[k], BRAID_FLOAT32, BRAID_SUM, rank, 0, counts[k], 50 + k);
        MP_OK(rank, braid_iallreduce(bufs[k], bufs[k], counts[k], BRAID_FLOAT32, BRAID_SUM, comm,
                                     &reqs[k]));
    }
    /* A blocking call issued while non-blocking ones are pending runs after them. */
    float x = (float)(rank + 1), y = 0;
    MP_OK(rank, braid_allreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, y == (float)(n * (n + 1) / 2), "blocking after pending: %g", y);
    for (int k = K - 1; k >= 0; k--) {
        int done = 0;
        if (k % 2) {
            while (!done)
                MP_OK(rank, braid_test(reqs[k], &done));
        } else {
            MP_OK(rank, braid_wait(reqs[k]));
        }
        MP_CHECK(rank,
                 !data_check_reduced(bufs[k], BRAID_FLOAT32, BRAID_SUM, n, 0, counts[k], 50 + k,
                                     "iallreduce"),
                 "iallreduce %d", k);
        free(bufs[k]);
    }
    braid_request_t b;
    MP_OK(rank, braid_ibarrier(comm, &b));
    MP_OK(rank, braid_wait(b));
    return 0;
}

/* braid_wait_time / braid_test_time: the completion time is braid's, not the caller's. Rank 0
 * posts an all-reduce and sleeps 500 ms while its worker completes it; the time it is given
 * lies between the post and 250 ms before the test that sees it. A test of a request not
 * done yet (a barrier rank 1 joins late) leaves t_done alone. */
static int completion_time(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float x = (float)(rank + 1), y = 0;
    MP_OK(rank, braid_barrier(comm));
    double t_post = proc_now_s(), t_done = -1;
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, comm, &req));
    if (rank == 0) {
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
        int done = 0;
        while (!done)
            MP_OK(rank, braid_test_time(req, &done, &t_done));
        double t_seen = proc_now_s();
        MP_CHECK(rank, t_done >= t_post && t_done < t_seen - 0.25,
                 "t_done %.6f not in [post %.6f, seen %.6f - 0.25)", t_done, t_post, t_seen);
    } else {
        MP_OK(rank, braid_wait_time(req, &t_done));
        MP_CHECK(rank, t_done >= t_post && t_done <= proc_now_s(), "t_done %.6f, post %.6f", t_done,
                 t_post);
    }
    MP_CHECK(rank, y == (float)(n * (n + 1) / 2), "sum %g", y);
    /* not done (rank 1 joins 400 ms late): *t_done_p untouched; NULL is allowed; done_p NULL
     * is an error. The barrier first: rank 1 left the all-reduce above about 500 ms before
     * rank 0 (which slept), so counting its delay from there let it join rank 0's ibarrier
     * first, and the test saw the barrier done at once. */
    MP_OK(rank, braid_barrier(comm));
    if (rank == 1) {
        struct timespec ts = {0, 400000000};
        nanosleep(&ts, NULL);
    }
    MP_OK(rank, braid_ibarrier(comm, &req));
    double keep = 12345.0;
    int done = 0;
    if (rank == 0) {
        MP_OK(rank, braid_test_time(req, &done, &keep));
        MP_CHECK(rank, !done && keep == 12345.0, "done %d at once, t_done %g", done, keep);
    }
    MP_CHECK(rank, braid_test_time(req, NULL, &keep) == BRAID_ERR_INVALID_ARG, "done_p NULL");
    if (!done) MP_OK(rank, braid_wait_time(req, NULL));
    return 0;
}

TestSuite(coll, .timeout = 300);

#define ALLREDUCE_TEST(N)                                                                          \
    Test(coll, allreduce_every_dtype_op_count_n##N)                                                \
    {                                                                                              \
        opts_t o = {.big = (N == 2 || N == 3 || N == 8), .unaligned = 1};                          \
        cr_assert_eq(mp_run(N, allreduce_matrix, &o, 240), 0, "some rank failed (see stderr)");    \
    }
ALLREDUCE_TEST(1)
ALLREDUCE_TEST(2)
ALLREDUCE_TEST(3)
ALLREDUCE_TEST(4)
ALLREDUCE_TEST(5)
ALLREDUCE_TEST(6)
ALLREDUCE_TEST(7)
ALLREDUCE_TEST(8)

Test(coll, broadcast_reduce_reduce_scatter_allgather_n1_to_n8)
{
    int ns[] = {1, 2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], rooted_and_ring, NULL, 240), 0, "n=%d failed (see stderr)",
                     ns[i]);
}

Test(coll, nonblocking_in_order_with_blocking)
{
    cr_assert_eq(mp_run(3, nonblocking, NULL, 120), 0);
    cr_assert_eq(mp_run(1, nonblocking, NULL, 120), 0);
}

Test(coll, wait_and_test_give_the_completion_time)
{
    cr_assert_eq(mp_run(2, completion_time, NULL, 120), 0);
}

static int channels_and_chunks(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += 3)
        if (data_check_allreduce(comm, rank, n, dt, BRAID_SUM, 100003, 0, 0, 9, "coll")) return 1;
    return 0;
}

Test(coll, many_channels_small_chunks_few_slots)
{
    setenv("BRAID_NCHANNELS", "3", 1);
    setenv("BRAID_CHUNK_SIZE", "4K", 1);
    setenv("BRAID_NSLOTS", "2", 1);
    cr_assert_eq(mp_run(4, channels_and_chunks, NULL, 120), 0);
}
