/* A group's small broadcasts (one root, any dtypes) and reduces (one root, dtype and op) fused
 * into one call (src/core/group_fuse.c), as real processes: every dtype (broadcasts of mixed
 * dtypes in one run) and every op of the reduces, counts 0, 1 and primes, in place and out,
 * unaligned, runs broken by a large call and by calls of another root (which fuse among
 * themselves), with sends/receives between them, each output checked against the independent
 * reference (tests/common/data.c, ref_reduce.h) and the fused runs counted from the debug log
 * against the rule; roots that alternate (nothing fuses); calls that read an earlier call's
 * output on the root (the root settles them itself: no fallback, results as one by one); calls
 * whose layouts differ between ranks but add up to the same bytes (a mismatch, not a silent
 * exchange of data) under the ring, tree, direct and hierarchical algorithms; over tcp. */
#include "data.h"
#include "fuselog.h"
#include "mp.h"
#include "ref_reduce.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { NCALLS = 9, LIMIT = 65536, NSWAP = 4 };

typedef struct {
    size_t count;
    int in_place;
    size_t off; /* bytes past an aligned start */
} call_t;

/* Call 5 is above the per-call bound (a quarter of 64 KiB) for 4- and 8-byte dtypes; two calls
 * of another root come before call 7 (a run of their own), which ends a run. */
static const call_t calls[NCALLS] = {{0, 0, 0},    {1, 0, 0}, {7, 1, 0},  {13, 0, 1}, {101, 0, 0},
                                     {4099, 1, 3}, {3, 0, 0}, {64, 1, 0}, {2, 0, 5}};

/* The broadcasts' dtypes differ from call to call. */
static braid_datatype_t bcast_dtype(int dt0, int c)
{
    return (braid_datatype_t)((dt0 + c) % BRAID_NUM_DTYPES);
}

static int all_bytes(const void *p, int v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != v) return 0;
    return 1;
}

/* One group: the calls of `calls` (broadcasts from root, or reduces to it), two calls of root
 * `other` before call 7, a send and a receive between. Every rank's inputs are its own values,
 * so a non-root's input that travels shows. */
static int one_group(braid_comm_t comm, int rank, int n, int bcast, int dt0, braid_redop_t op,
                     int root, int other)
{
    char *rbase[NCALLS], *sbase[NCALLS];
    void *send[NCALLS], *recv[NCALLS];
    braid_redop_t fop = bcast ? BRAID_SUM : op; /* the values data.c makes */
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = bcast ? bcast_dtype(dt0, c) : (braid_datatype_t)dt0;
        size_t bytes = calls[c].count * braid_dtype_size(dt);
        rbase[c] = data_xmalloc(bytes);
        sbase[c] = data_xmalloc(bytes);
        recv[c] = rbase[c] + calls[c].off;
        send[c] = calls[c].in_place ? recv[c] : sbase[c] + calls[c].off;
        memset(recv[c], 0x5a, bytes);
        data_fill(send[c], dt, fop, rank, 0, calls[c].count, 300 + c);
    }
    int32_t x1[3], y1[3] = {-1, -1, -1}, ring_in[3] = {rank, rank + 1, rank + 2};
    int32_t ring_out[3] = {-1, -1, -1};
    double x2[5], y2[5] = {-1, -1, -1, -1, -1};
    data_fill(x1, BRAID_INT32, BRAID_SUM, rank, 0, 3, 390);
    data_fill(x2, BRAID_FLOAT64, BRAID_SUM, rank, 0, 5, 391);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    MP_OK(rank, braid_group_start());
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = bcast ? bcast_dtype(dt0, c) : (braid_datatype_t)dt0;
        size_t cnt = calls[c].count;
        if (c == 2) MP_OK(rank, braid_send(ring_in, 3, BRAID_INT32, next, comm));
        if (c == 4) MP_OK(rank, braid_recv(ring_out, 3, BRAID_INT32, prev, comm));
        if (c == 7 && bcast) {
            MP_OK(rank, braid_broadcast(x1, x1, 3, BRAID_INT32, other, comm));
            MP_OK(rank, braid_broadcast(x2, y2, 5, BRAID_FLOAT64, other, comm));
        } else if (c == 7) { /* a non-root's output may be NULL */
            int32_t *out1 = rank == other ? y1 : NULL;
            MP_OK(rank, braid_reduce(x1, out1, 3, BRAID_INT32, BRAID_SUM, other, comm));
            MP_OK(rank, braid_reduce(x1, out1, 3, BRAID_INT32, BRAID_SUM, other, comm));
        }
        if (bcast)
            MP_OK(rank, braid_broadcast(send[c], recv[c], cnt, dt, root, comm));
        else
            MP_OK(rank, braid_reduce(send[c], recv[c], cnt, dt, op, root, comm));
    }
    MP_OK(rank, braid_group_end());
    int bad = 0;
    for (int c = 0; c < NCALLS; c++) {
        braid_datatype_t dt = bcast ? bcast_dtype(dt0, c) : (braid_datatype_t)dt0;
        size_t cnt = calls[c].count, bytes = cnt * braid_dtype_size(dt);
        char what[96];
        snprintf(what, sizeof(what), "%s %s op %d root %d call %d", bcast ? "broadcast" : "reduce",
                 braid_dtype_name(dt), (int)op, root, c);
        if (bcast)
            bad |= data_check_rank(recv[c], dt, fop, root, 0, cnt, 300 + c, what) != 0;
        else if (rank == root)
            bad |= data_check_reduced(recv[c], dt, op, n, 0, cnt, 300 + c, what) != 0;
        else if (!calls[c].in_place && !all_bytes(recv[c], 0x5a, bytes)) {
            fprintf(stderr, "rank %d: %s: a non-root's output was written\n", rank, what);
            bad = 1;
        }
        /* inputs stay as they were (in place: but where they are the output) */
        if (!calls[c].in_place || (!bcast && rank != root))
            bad |= data_check_rank(send[c], dt, fop, rank, 0, cnt, 300 + c, what) != 0;
        free(rbase[c]);
        free(sbase[c]);
    }
    MP_CHECK(rank, !bad, "wrong results (above)");
    if (bcast) {
        bad |= data_check_rank(x1, BRAID_INT32, BRAID_SUM, other, 0, 3, 390, "x1") != 0;
        bad |= data_check_rank(y2, BRAID_FLOAT64, BRAID_SUM, other, 0, 5, 391, "y2") != 0;
    } else if (rank == other) {
        /* both reduces wrote y1: the second one's result, the same */
        bad |= data_check_reduced(y1, BRAID_INT32, BRAID_SUM, n, 0, 3, 390, "y1") != 0;
    }
    MP_CHECK(rank, !bad, "wrong results of the calls of root %d (above)", other);
    for (int i = 0; i < 3; i++)
        MP_CHECK(rank, ring_out[i] == prev + i, "received %d from rank %d at %d", ring_out[i], prev,
                 i);
    return 0;
}

static int every_case(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int root = n - 1, other = 0;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        if (one_group(comm, rank, n, 1, dt, BRAID_SUM, root, other)) return 1;
        for (int op = 0; op < BRAID_NUM_OPS; op++)
            if (one_group(comm, rank, n, 0, dt, (braid_redop_t)op, root, other)) return 1;
    }
    return 0;
}

/* What every_case fuses on each rank of n >= 2: runs and calls of broadcasts, of reduces. The
 * two calls of the other root are a run of their own; avg reduces never fuse. */
static void expected(int want[2][2])
{
    memset(want, 0, 4 * sizeof(int));
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        for (int g = 0; g < 2; g++) { /* 0: broadcasts, 1: reduces */
            long bytes[NCALLS + 1];
            int k = 0;
            for (int c = 0; c < NCALLS; c++) {
                if (c == 7) bytes[k++] = -1; /* the other root's calls */
                braid_datatype_t t = g == 0 ? bcast_dtype(dt, c) : (braid_datatype_t)dt;
                bytes[k++] = (long)(calls[c].count * braid_dtype_size(t));
            }
            for (int op = 0; op < (g == 0 ? 1 : BRAID_NUM_OPS); op++) {
                want[g][0]++; /* the other root's two calls */
                want[g][1] += 2;
                if (g == 0 || op != BRAID_AVG)
                    fuselog_rule(bytes, k, LIMIT, &want[g][0], &want[g][1]);
            }
        }
    }
}

static const char *const fused_what[3] = {" broadcasts fused", " reduces fused",
                                          "inputs read after the fused call"};

Test(group_fuse_bcast, every_dtype_and_op_against_the_reference, .timeout = 300)
{
    int want[2][2];
    expected(want);
    for (int n = 1; n <= 4; n++) {
        char dir[32];
        cr_assert_eq(fuselog_start(dir), 0);
        cr_expect_eq(mp_run(n, every_case, NULL, 150), 0, "n=%d (see stderr)", n);
        int lines[3], got[3];
        int files = fuselog_count(dir, fused_what, 3, lines, got);
        cr_expect_eq(files, n, "n=%d: %d log files", n, files);
        for (int g = 0; g < 2; g++) {
            /* one rank: nothing to fuse; else every rank fuses every run */
            cr_expect_gt(want[g][0], 0, "the calls fuse nowhere: the test tests nothing");
            cr_expect_eq(lines[g], n > 1 ? n * want[g][0] : 0, "n=%d %s: %d fused runs, want %d", n,
                         g ? "reduce" : "broadcast", lines[g], n * want[g][0]);
            cr_expect_eq(got[g], n > 1 ? n * want[g][1] : 0, "n=%d %s: %d calls fused, want %d", n,
                         g ? "reduce" : "broadcast", got[g], n * want[g][1]);
        }
        cr_expect_eq(lines[2], 0, "n=%d: inputs read late where no call reads an output", n);
    }
}

Test(group_fuse_bcast, every_dtype_and_op_over_tcp, .timeout = 300)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, every_case, NULL, 150), 0, "see stderr");
}

/* The same groups (a few dtypes and ops) under each algorithm: one fake host for ring, tree and
 * direct, two for hier (arg: the algorithm). */
static int under_algo(braid_comm_t comm, int rank, int n, void *arg)
{
    const char *algo = arg;
    int hier = !strcmp(algo, "hier");
    braid_comm_t c = mp_fake_host_comm(comm, rank, hier ? rank % 2 : 0, algo);
    MP_CHECK(rank, c, "no fake-host communicator");
    int rc = 0;
    for (int root = 0; root < n && !rc; root += n - 1 > 0 ? n - 1 : 1)
        rc = one_group(c, rank, n, 1, BRAID_FLOAT32, BRAID_SUM, root, (root + 1) % n) ||
             one_group(c, rank, n, 0, BRAID_INT64, BRAID_MAX, root, (root + 1) % n) ||
             one_group(c, rank, n, 0, BRAID_BFLOAT16, BRAID_SUM, root, (root + 1) % n) ||
             one_group(c, rank, n, 0, BRAID_FLOAT32, BRAID_PROD, root, (root + 1) % n);
    braid_comm_destroy(c);
    return rc;
}

Test(group_fuse_bcast, fused_calls_under_each_algorithm, .timeout = 240)
{
    static const char *const algos[] = {"ring", "tree", "direct"};
    for (int a = 0; a < 3; a++)
        cr_expect_eq(mp_run(3, under_algo, (void *)algos[a], 60), 0, "%s (see stderr)", algos[a]);
    cr_expect_eq(mp_run(4, under_algo, "hier", 60), 0, "hier, 2x2 (see stderr)");
    cr_expect_eq(mp_run(3, under_algo, "hier", 60), 0, "hier, 2+1 (see stderr)");
}

/* Roots that alternate fuse nothing; pairs of one root fuse in pairs. */
static int roots(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 5 };
    int32_t v[6][K];
    for (int pass = 0; pass < 2; pass++) {
        static const int order[2][6] = {{0, 1, 0, 1, 0, 1}, {0, 0, 1, 1, 1, 0}};
        for (int j = 0; j < 6; j++)
            for (int i = 0; i < K; i++)
                v[j][i] = rank * 1000 + j * 10 + i;
        MP_OK(rank, braid_group_start());
        for (int j = 0; j < 6; j++)
            MP_OK(rank, braid_broadcast(v[j], v[j], K, BRAID_INT32, order[pass][j] % n, comm));
        MP_OK(rank, braid_group_end());
        for (int j = 0; j < 6; j++)
            for (int i = 0; i < K; i++) {
                int want = (order[pass][j] % n) * 1000 + j * 10 + i;
                MP_CHECK(rank, v[j][i] == want, "pass %d call %d [%d] = %d, want %d", pass, j, i,
                         v[j][i], want);
            }
    }
    return 0;
}

Test(group_fuse_bcast, different_roots_are_not_fused_together, .timeout = 120)
{
    for (int n = 2; n <= 3; n++) {
        char dir[32];
        cr_assert_eq(fuselog_start(dir), 0);
        cr_expect_eq(mp_run(n, roots, NULL, 60), 0, "n=%d (see stderr)", n);
        int lines[3], got[3];
        fuselog_count(dir, fused_what, 3, lines, got);
        /* pass 0: none; pass 1: calls 0-1 (root 0), 2-4 (root 1) */
        cr_expect_eq(lines[0], n * 2, "n=%d: %d fused runs, want %d", n, lines[0], n * 2);
        cr_expect_eq(got[0], n * 5, "n=%d: %d calls fused, want %d", n, got[0], n * 5);
    }
}

/* Expected reduction (reference, bits) of element i: ranks' inputs of seed s1 at call 1, then
 * the root's call 2 reads that output and the other ranks give inputs of seed s2. */
static uint64_t chained_want(braid_datatype_t dt, braid_redop_t op, int n, int root, size_t i,
                             int call)
{
    uint64_t acc = 0, v = 0;
    for (int r = 0; r < n; r++) {
        data_fill(&v, dt, op, r, i, 1, 61);
        acc = r ? ref_elem(dt, op, M_PAIR, acc, v, n).bits : v;
    }
    for (int r = 0; r < n && call == 2; r++) {
        if (r == root) continue;
        data_fill(&v, dt, op, r, i, 1, 62);
        acc = ref_elem(dt, op, M_PAIR, acc, v, n).bits;
    }
    return acc;
}

/* Calls that read, on the root, what an earlier call of the run wrote there. Broadcasts: call
 * 2's input overlaps call 1's output and what follows it; call 3's output overlaps call 1's.
 * Reduces (every dtype and op; avg does not fuse): call 2 reduces call 1's output (in place
 * the second time); all inputs -0.0 for float sums (the identity must keep the sign). */
static int chained(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    enum { K = 29 };
    int root = 1;
    int32_t x[K], y[K], w[2 * K], z[K];
    for (int i = 0; i < K; i++) {
        x[i] = rank * 1000 + i;
        y[i] = rank * 1000 + 500 + i;
        z[i] = -1;
        w[i] = -1;
        w[K + i] = rank * 1000 + 100 + i;
    }
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_broadcast(x, w, K, BRAID_INT32, root, comm));
    MP_OK(rank, braid_broadcast(w + 3, z, K, BRAID_INT32, root, comm));
    MP_OK(rank, braid_broadcast(y, w + K / 2, K, BRAID_INT32, root, comm));
    MP_OK(rank, braid_group_end());
    for (int i = 0; i < K; i++) {
        int zw = i + 3 < K ? root * 1000 + i + 3 : root * 1000 + 100 + i + 3 - K;
        MP_CHECK(rank, z[i] == zw, "z[%d] = %d, want %d", i, z[i], zw);
    }
    for (int i = 0; i < 2 * K; i++) {
        int ww = i < K / 2       ? root * 1000 + i
                 : i < K / 2 + K ? root * 1000 + 500 + i - K / 2
                                 : rank * 1000 + 100 + i - K;
        MP_CHECK(rank, w[i] == ww, "w[%d] = %d, want %d", i, w[i], ww);
    }
    uint64_t a[K], b[K], o1[K], o2[K];
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (int op = 0; op < BRAID_NUM_OPS; op++)
            for (int in_place = 0; in_place < 2; in_place++) {
                braid_datatype_t t = (braid_datatype_t)dt;
                data_fill(a, t, (braid_redop_t)op, rank, 0, K, 61);
                data_fill(b, t, (braid_redop_t)op, rank, 0, K, 62);
                memset(o1, 0x5a, sizeof(o1));
                memset(o2, 0x5a, sizeof(o2));
                int me = rank == root;
                void *in2 = me ? o1 : b, *out2 = in_place ? in2 : o2;
                MP_OK(rank, braid_group_start());
                MP_OK(rank, braid_reduce(a, o1, K, t, (braid_redop_t)op, root, comm));
                MP_OK(rank, braid_reduce(in2, out2, K, t, (braid_redop_t)op, root, comm));
                MP_OK(rank, braid_group_end());
                if (!me || op == BRAID_AVG) continue; /* avg does not fuse: see every_case */
                for (size_t i = 0; i < K; i++) {
                    uint64_t w1 = chained_want(t, (braid_redop_t)op, n, root, i, 1);
                    uint64_t w2 = chained_want(t, (braid_redop_t)op, n, root, i, 2);
                    uint64_t g1 = get_elem(t, o1, i), g2 = get_elem(t, out2, i);
                    MP_CHECK(rank, in_place || g1 == w1, "%s %s [%zu]: call 1 gave %llx, want %llx",
                             dtname(t), opname((braid_redop_t)op), i, (unsigned long long)g1,
                             (unsigned long long)w1);
                    MP_CHECK(rank, g2 == w2, "%s %s%s [%zu]: call 2 gave %llx, want %llx",
                             dtname(t), opname((braid_redop_t)op), in_place ? " in place" : "", i,
                             (unsigned long long)g2, (unsigned long long)w2);
                }
            }
    for (int dt = BRAID_FLOAT16; dt < BRAID_NUM_DTYPES; dt++) { /* -0.0 + -0.0 = -0.0 */
        braid_datatype_t t = (braid_datatype_t)dt;
        size_t es = braid_dtype_size(t);
        uint64_t neg0 = 1ull << (8 * es - 1);
        for (int i = 0; i < K; i++) {
            put_elem(t, a, (size_t)i, neg0);
            put_elem(t, b, (size_t)i, neg0);
        }
        memset(o1, 0x5a, sizeof(o1));
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_reduce(a, o1, K, t, BRAID_SUM, root, comm));
        MP_OK(rank, braid_reduce(rank == root ? o1 : b, o2, K, t, BRAID_SUM, root, comm));
        MP_OK(rank, braid_group_end());
        for (size_t i = 0; i < K && rank == root; i++)
            MP_CHECK(rank, get_elem(t, o2, i) == neg0, "%s: -0.0 summed to %llx", dtname(t),
                     (unsigned long long)get_elem(t, o2, i));
    }
    return 0;
}

Test(group_fuse_bcast, a_call_reading_an_earlier_output_on_the_root, .timeout = 180)
{
    for (int n = 2; n <= 4; n++) {
        char dir[32];
        cr_assert_eq(fuselog_start(dir), 0);
        cr_expect_eq(mp_run(n, chained, NULL, 90), 0, "n=%d (see stderr)", n);
        int lines[3], got[3];
        fuselog_count(dir, fused_what, 3, lines, got);
        /* every rank fuses every pair (avg excepted); the root reads the second input late */
        int reduces = 2 * BRAID_NUM_DTYPES * (BRAID_NUM_OPS - 1) + 6;
        cr_expect_eq(lines[0], n, "n=%d: %d fused broadcast runs, want %d", n, lines[0], n);
        cr_expect_eq(got[0], 3 * n, "n=%d: %d broadcasts fused, want %d", n, got[0], 3 * n);
        cr_expect_eq(lines[1], n * reduces, "n=%d: %d fused reduce runs, want %d", n, lines[1],
                     n * reduces);
        cr_expect_eq(lines[2], reduces, "n=%d: the root read %d runs' inputs late, want %d", n,
                     lines[2], reduces);
    }
}

/* Calls whose layouts differ between ranks but add up to the same bytes: rank 0's broadcasts
 * are 4 float16 then 4 int32, the others' 4 int32 then 4 float16 (the same counts and bytes);
 * float32 counts 3 then 5 against 5 then 3; reduces of 1 then 2 int32 against 2 then 1; two
 * broadcasts of 4 bytes against one of 8. Each must be a mismatch: a rank that receives from
 * a rank of another layout fails with BRAID_ERR_MISMATCH naming the fused calls (counted in
 * found[case], shared by the ranks); a rank whose part needed no such rank (it agrees with the
 * ranks it received from) may return success, and then its next call fails. */
typedef struct {
    const char *algo; /* on fake hosts; NULL: the cost model on a split of comm */
    atomic_int *found;
} swap_arg_t;

static int swapped(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    const swap_arg_t *sa = arg;
    const char *algo = sa->algo;
    char a[64] = {0}, b[64] = {0};
    for (int kase = 0; kase < NSWAP; kase++) {
        braid_comm_t c = NULL;
        if (algo)
            c = mp_fake_host_comm(comm, rank, strcmp(algo, "hier") ? 0 : rank % 2, algo);
        else
            MP_OK(rank, braid_comm_split(comm, 0, rank, &c));
        MP_CHECK(rank, c, "no communicator");
        int zero = rank == 0, root = kase % 2;
        MP_OK(rank, braid_group_start());
        if (kase == 0) {
            MP_OK(rank, braid_broadcast(a, b, 4, zero ? BRAID_FLOAT16 : BRAID_INT32, root, c));
            MP_OK(rank, braid_broadcast(a, b, 4, zero ? BRAID_INT32 : BRAID_FLOAT16, root, c));
        } else if (kase == 1) {
            MP_OK(rank, braid_broadcast(a, b, zero ? 3 : 5, BRAID_FLOAT32, root, c));
            MP_OK(rank, braid_broadcast(a, b, zero ? 5 : 3, BRAID_FLOAT32, root, c));
        } else if (kase == 2) {
            MP_OK(rank, braid_reduce(a, b, zero ? 1 : 2, BRAID_INT32, BRAID_SUM, root, c));
            MP_OK(rank, braid_reduce(a, b, zero ? 2 : 1, BRAID_INT32, BRAID_SUM, root, c));
        } else {
            MP_OK(rank, braid_broadcast(a, b, zero ? 4 : 8, BRAID_UINT8, root, c));
            if (zero) MP_OK(rank, braid_broadcast(a, b, 4, BRAID_UINT8, root, c));
        }
        braid_result_t r = braid_group_end();
        if (r == BRAID_SUCCESS) r = braid_barrier(c);
        const char *msg = braid_last_error();
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE,
                 "case %d, %s: group end and the next call returned %s: %s", kase,
                 algo ? algo : "auto", braid_strerror(r), msg);
        if (r == BRAID_ERR_MISMATCH && strstr(msg, "2 calls fused"))
            atomic_fetch_add(&sa->found[kase], 1);
        braid_comm_destroy(c);
    }
    return 0;
}

static void swap_run(int n, const char *algo, atomic_int *found, const char *what)
{
    for (int k = 0; k < NSWAP; k++)
        atomic_store(&found[k], 0);
    swap_arg_t sa = {algo, found};
    cr_expect_eq(mp_run(n, swapped, &sa, 60), 0, "%s (see stderr)", what);
    for (int k = 0; k < NSWAP; k++)
        cr_expect_gt(atomic_load(&found[k]), 0, "%s, case %d: no rank saw the layouts differ", what,
                     k);
}

Test(group_fuse_bcast, layouts_that_add_up_alike_are_a_mismatch, .timeout = 240)
{
    setenv("BRAID_TIMEOUT", "20", 1);
    atomic_int *found = mmap(NULL, NSWAP * sizeof(*found), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(found != MAP_FAILED);
    swap_run(2, NULL, found, "2 ranks");
    swap_run(3, NULL, found, "3 ranks");
    static const char *const algos[] = {"ring", "tree", "direct"};
    for (int i = 0; i < 3; i++)
        swap_run(3, algos[i], found, algos[i]);
    /* The hierarchical broadcast and reduce check the layout in their stages. */
    swap_run(4, "hier", found, "4 ranks on 2 fake hosts, hier");
    swap_run(3, "hier", found, "3 ranks on 2 fake hosts, hier");
    setenv("BRAID_TRANSPORT", "tcp", 1);
    swap_run(3, NULL, found, "3 ranks, tcp");
    munmap(found, NSWAP * sizeof(*found));
}

/* A communicator that failed before the group's end (here: aborted): the fused broadcasts fail
 * at once and the root's outputs stay untouched, as each call's one by one would (the root
 * packed its inputs into its outputs before the fused call learned of the failure). */
static int aborted_first(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    MP_OK(rank, braid_barrier(comm));
    MP_OK(rank, braid_comm_abort(comm));
    int32_t in[3][5], out[3][5];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 5; i++) {
            in[c][i] = 100 * c + i;
            out[c][i] = -7;
        }
    MP_OK(rank, braid_group_start());
    for (int c = 0; c < 3; c++)
        (void)braid_broadcast(in[c], out[c], 5, BRAID_INT32, 0, comm);
    braid_result_t res = braid_group_end();
    MP_CHECK(rank, res == BRAID_ERR_ABORTED, "the group's end after an abort: %d", (int)res);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 5; i++)
            MP_CHECK(rank, out[c][i] == -7, "call %d's output [%d] = %d after a failed group", c, i,
                     (int)out[c][i]);
    return 0;
}

Test(group_fuse_bcast, an_aborted_communicator_leaves_the_outputs_untouched, .timeout = 60)
{
    cr_expect_eq(mp_run(2, aborted_first, NULL, 30), 0, "see stderr");
}
