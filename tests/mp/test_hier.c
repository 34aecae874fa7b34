/* Hierarchical broadcast, reduce and reduce-scatter as real processes on faked hosts (see
 * test_algos.c): 1..4 hosts, even and uneven ranks per host, contiguous and shuffled
 * placements. Broadcast and reduce run from / to every root (the leaders are the root's local
 * index, or local rank 0 plus a stage on the root's host when some host has no such index);
 * reduce-scatter runs on equal hosts and falls back to the ring elsewhere. Results are checked
 * bit-exactly against the reference (tests/common/data.c); white-box counters say which
 * algorithm ran. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int host[16];
    const char *algo;
    int bcast_hier; /* whether broadcast and reduce (count > 0) must run hier */
    int rs_hier;    /* whether reduce-scatter must run hier */
} shape_t;

static uint64_t hier_runs(braid_comm_t c)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st ? st->runs[BRAID_ALGO_HIER] : 0;
}

static int check_bcast(braid_comm_t c, int rank, int n, const shape_t *s, braid_datatype_t dt,
                       size_t count, int in_place, int seed)
{
    size_t es = braid_dtype_size(dt);
    for (int root = 0; root < n; root++) {
        char *in = malloc(count * es + 1), *out = malloc(count * es + 1);
        MP_CHECK(rank, in && out, "out of memory");
        data_fill(in, dt, BRAID_SUM, root, 0, count, seed + root);
        memset(out, 0x5a, count * es);
        uint64_t before = hier_runs(c);
        void *send = rank == root ? (in_place ? (memcpy(out, in, count * es), out) : in) : NULL;
        MP_OK(rank, braid_broadcast(send, out, count, dt, root, c));
        MP_CHECK(rank,
                 !data_check_rank(out, dt, BRAID_SUM, root, 0, count, seed + root, "hier bcast"),
                 "broadcast of %zu from root %d wrong", count, root);
        MP_CHECK(rank, (hier_runs(c) > before) == s->bcast_hier,
                 "broadcast of %zu from root %d: hier ran %d, expected %d", count, root,
                 (int)(hier_runs(c) > before), s->bcast_hier);
        free(in);
        free(out);
    }
    return 0;
}

/* Reduce to every root: the root's output in place or not; the other ranks pass no output
 * (NULL) or one that must stay untouched. */
static int check_reduce(braid_comm_t c, int rank, int n, const shape_t *s, braid_datatype_t dt,
                        braid_redop_t op, size_t count, int in_place, int seed)
{
    size_t es = braid_dtype_size(dt), bytes = count * es;
    for (int root = 0; root < n; root++) {
        char *in = malloc(bytes + 1), *out = malloc(bytes + 1), *canary = malloc(bytes + 1);
        MP_CHECK(rank, in && out && canary, "out of memory");
        data_fill(in, dt, op, rank, 0, count, seed + root);
        memset(out, 0x5a, bytes);
        memset(canary, 0x5a, bytes);
        void *send = in, *recv = out;
        if (rank != root)
            recv = in_place ? NULL : out;
        else if (in_place)
            send = recv = in;
        uint64_t before = hier_runs(c);
        MP_OK(rank, braid_reduce(send, recv, count, dt, op, root, c));
        if (rank == root)
            MP_CHECK(rank,
                     !data_check_reduced(recv, dt, op, n, 0, count, seed + root, "hier reduce"),
                     "reduce %s %s of %zu to root %d (%s) wrong", braid_dtype_name(dt),
                     braid_op_name(op), count, root, in_place ? "in place" : "oop");
        else
            MP_CHECK(rank, !memcmp(out, canary, bytes),
                     "reduce of %zu to root %d wrote the output of non-root rank %d", count, root,
                     rank);
        int want = s->bcast_hier && count > 0;
        MP_CHECK(rank, (hier_runs(c) > before) == want,
                 "reduce of %zu to root %d: hier ran %d, expected %d", count, root,
                 (int)(hier_runs(c) > before), want);
        free(in);
        free(out);
        free(canary);
    }
    return 0;
}

static int check_rs(braid_comm_t c, int rank, int n, const shape_t *s, braid_datatype_t dt,
                    braid_redop_t op, size_t N, int in_place, int seed)
{
    size_t es = braid_dtype_size(dt);
    char *in = malloc((size_t)n * N * es + 1), *out = malloc(N * es + 1);
    MP_CHECK(rank, in && out, "out of memory");
    data_fill(in, dt, op, rank, 0, (size_t)n * N, seed);
    void *dst = in_place ? in + (size_t)rank * N * es : out;
    uint64_t before = hier_runs(c);
    MP_OK(rank, braid_reduce_scatter(in, dst, N, dt, op, c));
    MP_CHECK(rank, !data_check_reduced(dst, dt, op, n, (size_t)rank * N, N, seed, "hier rs"),
             "reduce_scatter dtype %d op %d recvcount %zu wrong", (int)dt, (int)op, N);
    MP_CHECK(rank, (hier_runs(c) > before) == s->rs_hier,
             "reduce_scatter of %zu: hier ran %d, expected %d", N, (int)(hier_runs(c) > before),
             s->rs_hier);
    free(in);
    free(out);
    return 0;
}

static int bcast_rs_on_shape(braid_comm_t comm, int rank, int n, void *arg)
{
    const shape_t *s = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, s->host[rank], s->algo);
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t counts[] = {1, 7, 1000, 65537};
    int seed = 3;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        if (check_bcast(c, rank, n, s, BRAID_FLOAT32, counts[k], (int)(k & 1), seed)) return 1;
        seed += n;
    }
    if (check_bcast(c, rank, n, s, BRAID_INT8, 3001, 0, seed)) return 1;
    seed += n;
    struct {
        braid_datatype_t dt;
        braid_redop_t op;
        size_t count;
    } red[] = {{BRAID_FLOAT32, BRAID_SUM, 4099},  {BRAID_INT32, BRAID_AVG, 1},
               {BRAID_FLOAT16, BRAID_AVG, 7},     {BRAID_INT64, BRAID_PROD, 13},
               {BRAID_UINT8, BRAID_MAX, 0},       {BRAID_BFLOAT16, BRAID_MIN, 1031},
               {BRAID_FLOAT64, BRAID_AVG, 65537}, {BRAID_UINT32, BRAID_AVG, 257}};
    for (size_t k = 0; k < sizeof(red) / sizeof(red[0]); k++, seed += n)
        if (check_reduce(c, rank, n, s, red[k].dt, red[k].op, red[k].count, (int)(k & 1), seed))
            return 1;
    size_t rcounts[] = {1, 5, 4099, 40000};
    for (size_t k = 0; k < sizeof(rcounts) / sizeof(rcounts[0]); k++) {
        if (check_rs(c, rank, n, s, BRAID_FLOAT32, BRAID_SUM, rcounts[k], (int)(k & 1), seed++))
            return 1;
        if (check_rs(c, rank, n, s, BRAID_INT32, BRAID_MAX, rcounts[k], (int)!(k & 1), seed++))
            return 1;
    }
    for (int op = 0; op < BRAID_NUM_OPS; op++)
        if (check_rs(c, rank, n, s, BRAID_FLOAT16, op, 333, 0, seed++) ||
            check_rs(c, rank, n, s, BRAID_INT64, op, 77, 1, seed++))
            return 1;
    /* All-reduce still agrees around them. */
    if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, 4096, 0, 0, seed, "hier"))
        return 1;
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

TestSuite(hier, .timeout = 240);

#define SHAPE_TEST(name, nr, ...)                                                                  \
    Test(hier, name)                                                                               \
    {                                                                                              \
        shape_t s = __VA_ARGS__;                                                                   \
        cr_assert_eq(mp_run(nr, bcast_rs_on_shape, &s, 200), 0, "some rank failed (see stderr)");  \
    }

SHAPE_TEST(two_hosts_x_2_forced, 4, {{0, 0, 1, 1}, "hier", 1, 1})
SHAPE_TEST(two_hosts_x_2_interleaved_forced, 4, {{0, 1, 0, 1}, "hier", 1, 1})
SHAPE_TEST(uneven_3_1_bcast_only, 4, {{0, 0, 0, 1}, "hier", 1, 0})
SHAPE_TEST(uneven_1_2_3_shuffled_bcast_only, 6, {{2, 1, 2, 0, 1, 2}, "hier", 1, 0})
SHAPE_TEST(four_hosts_x_2_shuffled, 8, {{3, 2, 1, 0, 0, 1, 2, 3}, "hier", 1, 1})
SHAPE_TEST(four_hosts_uneven_2_1_2_1, 6, {{0, 0, 1, 2, 2, 3}, "hier", 1, 0})
SHAPE_TEST(one_host_falls_back_to_ring, 3, {{0, 0, 0}, "hier", 0, 0})
SHAPE_TEST(one_rank_per_host_falls_back_to_ring, 3, {{0, 1, 2}, "hier", 0, 0})

/* Pipelined hierarchical all-reduce (from 2 x 4 MiB of body: segments, the inter-host step of
 * one on the inter sub-communicator's worker while this thread runs the intra-host steps of
 * its neighbours): bit-exact sums and averages, in place and not, with a tail, on 2 hosts x 2
 * and 2 hosts x 3 (shuffled); then a rank killed during one: every survivor gets an error
 * (not a hang) naming the dead rank by its parent-communicator number. */
static int pipelined_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const int *host = arg;
    braid_comm_t c = mp_fake_host_comm(comm, rank, host[rank], "hier");
    MP_CHECK(rank, c != NULL, "fake-host communicator");
    uint64_t before = hier_runs(c);
    size_t big = ((size_t)9 << 20) / 4 + 7; /* 9 MiB of floats and a tail */
    if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, big, 0, 0, 31, "hier pipe") ||
        data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, big, 1, 0, 32, "hier pipe") ||
        data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_AVG, big, 0, 0, 33, "hier pipe") ||
        data_check_allreduce(c, rank, n, BRAID_INT32, BRAID_MAX, ((size_t)33 << 20) / 4, 1, 0, 34,
                             "hier pipe"))
        return 1;
    MP_CHECK(rank, hier_runs(c) - before == 4, "hier ran %llu of 4 all-reduces",
             (unsigned long long)(hier_runs(c) - before));
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(hier, pipelined_allreduce_2_hosts_x_2)
{
    int host[] = {0, 0, 1, 1};
    cr_assert_eq(mp_run(4, pipelined_fn, host, 200), 0, "some rank failed (see stderr)");
}

Test(hier, pipelined_allreduce_2_hosts_x_3_shuffled)
{
    int host[] = {1, 0, 1, 0, 0, 1};
    cr_assert_eq(mp_run(6, pipelined_fn, host, 200), 0, "some rank failed (see stderr)");
}
