/* The collectives on the send/recv connections as real processes (n = 1..8, shm and tcp):
 * alltoall, alltoallv (uneven counts, zero counts for some peers, gaps between blocks),
 * gather and scatter (every root), allgatherv, reduce_scatterv (every dtype x op), each in
 * place where it applies and with its i-form; argument errors naming the argument; a rank that
 * calls another collective (of either family) or another count is BRAID_ERR_MISMATCH naming
 * both calls. Data depends on (sender, receiver, index); checks are bit-exact against
 * tests/common/data.c. */
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

static int seed_of(int s, int d)
{
    return 3 + s * 89 + d * 17;
}

/* ---- alltoall ---------------------------------------------------------------------------- */
static int alltoall_matrix(braid_comm_t comm, int rank, int n, void *arg)
{
    int iform = arg != NULL;
    size_t counts[] = {0, 1, 7, 1009, data_quick() ? 5003 : 30011};
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (int ip = 0; ip < 2; ip++) {
                size_t c = counts[ci], es = braid_dtype_size(dt), blk = c * es;
                size_t off = ci & 1 ? 1 + (size_t)dt % 3 : 0;
                char *in = data_xmalloc(blk * (size_t)n + 8),
                     *out = data_xmalloc(blk * (size_t)n + 8);
                for (int d = 0; d < n; d++)
                    data_fill(in + off + (size_t)d * blk, dt, BRAID_SUM, rank, 0, c,
                              seed_of(rank, d));
                char *o = ip ? in : out;
                if (!ip) memset(out, 0xAB, blk * (size_t)n + 8);
                if (iform) {
                    braid_request_t q;
                    MP_OK(rank, braid_ialltoall(in + off, o + off, c, dt, comm, &q));
                    MP_OK(rank, braid_wait(q));
                } else {
                    MP_OK(rank, braid_alltoall(in + off, o + off, c, dt, comm));
                }
                for (int s = 0; s < n; s++) {
                    char what[96];
                    snprintf(what, sizeof(what), "alltoall n=%d %s c=%zu ip=%d from %d", n,
                             braid_dtype_name(dt), c, ip, s);
                    MP_CHECK(rank,
                             !data_check_rank(o + off + (size_t)s * blk, dt, BRAID_SUM, s, 0, c,
                                              seed_of(s, rank), what),
                             "%s", what);
                }
                free(in);
                free(out);
            }
    return 0;
}

Test(coll_p2p, alltoall_every_dtype_count_in_place, .timeout = 300)
{
    int ns[] = {1, 2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], alltoall_matrix, NULL, 200), 0, "n=%d", ns[i]);
    cr_assert_eq(mp_run(3, alltoall_matrix, (void *)1, 200), 0, "ialltoall n=3");
}

Test(coll_p2p, alltoall_over_tcp, .timeout = 300)
{
    setenv("BRAID_TRANSPORT", "tcp", 1);
    int ns[] = {2, 3, 4};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], alltoall_matrix, NULL, 200), 0, "tcp n=%d", ns[i]);
}

/* Blocks of 2 MiB and more: the own block's copy takes streaming stores where
 * BRAID_DIRECT_NT_SLOTS is on (core/p2p.c run_copies); forced on and off, in place and not,
 * unaligned. */
static int alltoall_big(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_datatype_t dts[] = {BRAID_FLOAT32, BRAID_INT8};
    for (size_t k = 0; k < 2; k++)
        for (int ip = 0; ip < 2; ip++) {
            braid_datatype_t dt = dts[k];
            size_t es = braid_dtype_size(dt), c = ((size_t)2 << 20) / es + 1001, blk = c * es;
            size_t off = 1 + k;
            char *in = data_xmalloc(blk * (size_t)n + 8), *out = data_xmalloc(blk * (size_t)n + 8);
            for (int d = 0; d < n; d++)
                data_fill(in + off + (size_t)d * blk, dt, BRAID_SUM, rank, 0, c, seed_of(rank, d));
            char *o = ip ? in : out;
            MP_OK(rank, braid_alltoall(in + off, o + off, c, dt, comm));
            for (int s = 0; s < n; s++)
                MP_CHECK(rank,
                         !data_check_rank(o + off + (size_t)s * blk, dt, BRAID_SUM, s, 0, c,
                                          seed_of(s, rank), "alltoall big"),
                         "n=%d %s ip=%d from %d", n, braid_dtype_name(dt), ip, s);
            free(in);
            free(out);
        }
    return 0;
}

Test(coll_p2p, alltoall_2mib_blocks_with_and_without_streaming_copies, .timeout = 300)
{
    const char *modes[] = {"1", "0"};
    for (int m = 0; m < 2; m++) {
        setenv("BRAID_DIRECT_NT_SLOTS", modes[m], 1);
        cr_assert_eq(mp_run(2, alltoall_big, NULL, 200), 0, "n=2 nt %s", modes[m]);
        cr_assert_eq(mp_run(3, alltoall_big, NULL, 200), 0, "n=3 nt %s", modes[m]);
    }
}

/* ---- alltoallv: uneven, some zero, gaps ---------------------------------------------------- */
static size_t vcount(int s, int d, size_t scale)
{
    if ((s * 7 + d * 3) % 5 == 0) return 0;
    return (size_t)(s + 2 * d + 1) * scale + (size_t)((s + d) % 3);
}

static int alltoallv_case(braid_comm_t comm, int rank, int n, void *arg)
{
    size_t scale = arg ? 3001 : 3;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt += arg ? 4 : 1)
        for (int ip = 0; ip < 2; ip++) {
            size_t es = braid_dtype_size(dt);
            size_t sc[64], sd[64], rc[64], rd[64], sx = 0, rx = 0;
            for (int j = 0; j < n; j++) {
                sc[j] = vcount(rank, j, scale);
                rc[j] = vcount(j, rank, scale);
            }
            /* in place: one layout for both (MPI_IN_PLACE style needs rc == sc per slot):
             * blocks laid out in reverse peer order with one-element gaps */
            for (int j = n - 1; j >= 0; j--) {
                sd[j] = sx;
                sx += sc[j] + 1;
                rd[j] = rx;
                rx += rc[j] + 1;
            }
            size_t span = (sx > rx ? sx : rx) * es;
            char *in = data_xmalloc(span + 8), *out = data_xmalloc(span + 8);
            memset(in, 0x5A, span);
            for (int j = 0; j < n; j++)
                data_fill(in + sd[j] * es, dt, BRAID_SUM, rank, 0, sc[j], seed_of(rank, j));
            char *o = ip ? in : out;
            if (!ip) memset(out, 0x5A, span);
            if (dt % 2) { /* the i-form; its arrays may change once it returns */
                size_t a[4][64];
                memcpy(a[0], sc, sizeof(sc));
                memcpy(a[1], sd, sizeof(sd));
                memcpy(a[2], rc, sizeof(rc));
                memcpy(a[3], rd, sizeof(rd));
                braid_request_t q;
                MP_OK(rank, braid_ialltoallv(in, a[0], a[1], o, a[2], a[3], dt, comm, &q));
                memset(a, 0xEE, sizeof(a));
                MP_OK(rank, braid_wait(q));
            } else {
                MP_OK(rank, braid_alltoallv(in, sc, sd, o, rc, rd, dt, comm));
            }
            for (int s = 0; s < n; s++) {
                char what[96];
                snprintf(what, sizeof(what), "alltoallv n=%d %s ip=%d from %d (%zu)", n,
                         braid_dtype_name(dt), ip, s, rc[s]);
                MP_CHECK(rank,
                         !data_check_rank(o + rd[s] * es, dt, BRAID_SUM, s, 0, rc[s],
                                          seed_of(s, rank), what),
                         "%s", what);
                if (!ip) /* the gap after each block is untouched */
                    MP_CHECK(rank, (unsigned char)o[(rd[s] + rc[s]) * es] == 0x5A,
                             "%s: gap written", what);
            }
            free(in);
            free(out);
        }
    return 0;
}

Test(coll_p2p, alltoallv_uneven_and_zero_counts, .timeout = 300)
{
    int ns[] = {1, 2, 3, 4, 6, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        cr_assert_eq(mp_run(ns[i], alltoallv_case, NULL, 200), 0, "n=%d", ns[i]);
        cr_assert_eq(mp_run(ns[i], alltoallv_case, (void *)1, 200), 0, "n=%d large", ns[i]);
    }
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(3, alltoallv_case, (void *)1, 200), 0, "tcp n=3");
}

/* ---- gather, scatter, every root ------------------------------------------------------------ */
static int gather_scatter(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t counts[] = {0, 1, 13, 7919};
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
            for (int root = 0; root < n; root++)
                for (int ip = 0; ip < 2; ip++) {
                    size_t c = counts[ci], es = braid_dtype_size(dt), blk = c * es;
                    char *big = data_xmalloc(blk * (size_t)n + 8), *small = data_xmalloc(blk + 8);
                    char what[96];
                    /* gather: in place at the root means sendbuf = recvbuf + root block */
                    const char *send = small;
                    data_fill(small, dt, BRAID_SUM, rank, 0, c, seed_of(rank, root));
                    memset(big, 0x11, blk * (size_t)n);
                    if (ip && rank == root) {
                        memcpy(big + (size_t)root * blk, small, blk);
                        send = big + (size_t)root * blk;
                    }
                    braid_request_t q;
                    MP_OK(rank, braid_igather(send, big, c, dt, root, comm, &q));
                    MP_OK(rank, braid_wait(q));
                    for (int s = 0; rank == root && s < n; s++) {
                        snprintf(what, sizeof(what), "gather n=%d %s c=%zu root=%d ip=%d from %d",
                                 n, braid_dtype_name(dt), c, root, ip, s);
                        MP_CHECK(rank,
                                 !data_check_rank(big + (size_t)s * blk, dt, BRAID_SUM, s, 0, c,
                                                  seed_of(s, root), what),
                                 "%s", what);
                    }
                    /* scatter: block d of the root's input to rank d */
                    if (rank == root)
                        for (int d = 0; d < n; d++)
                            data_fill(big + (size_t)d * blk, dt, BRAID_SUM, root, 0, c,
                                      seed_of(root, d) + 1);
                    memset(small, 0x22, blk);
                    void *recv = ip && rank == root ? big + (size_t)root * blk : small;
                    if ((ci + (size_t)root) % 2) {
                        MP_OK(rank, braid_iscatter(big, recv, c, dt, root, comm, &q));
                        MP_OK(rank, braid_wait(q));
                    } else {
                        MP_OK(rank, braid_scatter(big, recv, c, dt, root, comm));
                    }
                    snprintf(what, sizeof(what), "scatter n=%d %s c=%zu root=%d ip=%d", n,
                             braid_dtype_name(dt), c, root, ip);
                    MP_CHECK(rank,
                             !data_check_rank(recv, dt, BRAID_SUM, root, 0, c,
                                              seed_of(root, rank) + 1, what),
                             "%s", what);
                    free(big);
                    free(small);
                }
    return 0;
}

Test(coll_p2p, gather_scatter_every_root, .timeout = 300)
{
    int ns[] = {1, 2, 3, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], gather_scatter, NULL, 200), 0, "n=%d", ns[i]);
}

/* ---- allgatherv, reduce_scatterv --------------------------------------------------------- */
static size_t ucount(int r, size_t scale)
{
    return r % 3 == 1 ? 0 : (size_t)(r + 1) * scale + (size_t)r % 2; /* some ranks give none */
}

static int v_collectives(braid_comm_t comm, int rank, int n, void *arg)
{
    size_t scale = arg ? 4099 : 2;
    size_t rc[64], dp[64], tot = 0;
    for (int i = 0; i < n; i++) {
        rc[i] = ucount(i, scale);
        dp[i] = tot;
        tot += rc[i];
    }
    int seed = 40;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        size_t es = braid_dtype_size(dt);
        for (int ip = 0; ip < 2; ip++) {
            char *out = data_xmalloc(tot * es + 8), *in = data_xmalloc(tot * es + 8);
            /* allgatherv */
            data_fill(in, dt, BRAID_SUM, rank, 0, rc[rank], seed_of(rank, 0));
            memset(out, 0x33, tot * es);
            const void *send = in;
            if (ip) {
                memcpy(out + dp[rank] * es, in, rc[rank] * es);
                send = out + dp[rank] * es;
            }
            if (ip) { /* the i-form; its arrays may change once it returns */
                size_t a[2][64];
                memcpy(a[0], rc, sizeof(rc));
                memcpy(a[1], dp, sizeof(dp));
                braid_request_t q;
                MP_OK(rank, braid_iallgatherv(send, rc[rank], out, a[0], a[1], dt, comm, &q));
                memset(a, 0xEE, sizeof(a));
                MP_OK(rank, braid_wait(q));
            } else {
                MP_OK(rank, braid_allgatherv(send, rc[rank], out, rc, dp, dt, comm));
            }
            for (int s = 0; s < n; s++) {
                char what[96];
                snprintf(what, sizeof(what), "allgatherv n=%d %s ip=%d from %d", n,
                         braid_dtype_name(dt), ip, s);
                MP_CHECK(rank,
                         !data_check_rank(out + dp[s] * es, dt, BRAID_SUM, s, 0, rc[s],
                                          seed_of(s, 0), what),
                         "%s", what);
            }
            /* reduce_scatterv, every op */
            for (int op = 0; op < BRAID_NUM_OPS; op++, seed++) {
                data_fill(in, dt, (braid_redop_t)op, rank, 0, tot, seed);
                void *o = ip ? in + dp[rank] * es : out;
                braid_request_t q;
                MP_OK(rank, braid_ireduce_scatterv(in, o, rc, dt, (braid_redop_t)op, comm, &q));
                MP_OK(rank, braid_wait(q));
                char what[96];
                snprintf(what, sizeof(what), "reduce_scatterv n=%d %s %s ip=%d (%zu)", n,
                         braid_dtype_name(dt), braid_op_name(op), ip, rc[rank]);
                MP_CHECK(rank,
                         !data_check_reduced(o, dt, (braid_redop_t)op, n, dp[rank], rc[rank], seed,
                                             what),
                         "%s", what);
            }
            free(in);
            free(out);
        }
    }
    return 0;
}

Test(coll_p2p, allgatherv_and_reduce_scatterv, .timeout = 300)
{
    int ns[] = {1, 2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        cr_assert_eq(mp_run(ns[i], v_collectives, NULL, 200), 0, "n=%d", ns[i]);
        if (!data_quick() || ns[i] < 4)
            cr_assert_eq(mp_run(ns[i], v_collectives, (void *)1, 200), 0, "n=%d large", ns[i]);
    }
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_assert_eq(mp_run(3, v_collectives, (void *)1, 200), 0, "tcp n=3");
}

/* ---- errors -------------------------------------------------------------------------------- */
static int arg_errors(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float a[64] = {0}, b[64] = {0};
    size_t cnt[64] = {0}, dsp[64] = {0};
    braid_result_t r;
#define EXPECT_ARG(call, word)                                                                     \
    do {                                                                                           \
        r = (call);                                                                                \
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), word),             \
                 "%s: %s: %s", #call, braid_strerror(r), braid_last_error());                      \
    } while (0)
    EXPECT_ARG(braid_alltoall(a, b, 1, (braid_datatype_t)42, comm), "dtype");
    EXPECT_ARG(braid_alltoall(NULL, b, 1, BRAID_FLOAT32, comm), "sendbuf");
    EXPECT_ARG(braid_alltoall(a, NULL, 1, BRAID_FLOAT32, comm), "recvbuf");
    EXPECT_ARG(braid_alltoall(a, a + 1, 2, BRAID_FLOAT32, comm), "overlap");
    EXPECT_ARG(braid_alltoall(a, b, SIZE_MAX / 2, BRAID_FLOAT32, comm), "count");
    EXPECT_ARG(braid_alltoallv(a, NULL, dsp, b, cnt, dsp, BRAID_FLOAT32, comm), "sendcounts");
    EXPECT_ARG(braid_alltoallv(a, cnt, NULL, b, cnt, dsp, BRAID_FLOAT32, comm), "sdispls");
    EXPECT_ARG(braid_alltoallv(a, cnt, dsp, b, NULL, dsp, BRAID_FLOAT32, comm), "recvcounts");
    EXPECT_ARG(braid_alltoallv(a, cnt, dsp, b, cnt, NULL, BRAID_FLOAT32, comm), "rdispls");
    cnt[n - 1] = SIZE_MAX / 3;
    EXPECT_ARG(braid_alltoallv(a, cnt, dsp, b, cnt, dsp, BRAID_FLOAT32, comm), "sendcounts[");
    cnt[n - 1] = 0;
    /* This rank's own block: its send and receive counts must agree (a local copy nobody else
     * checks). More to send than to receive, less (in place: past the input's copy), and
     * nothing to send from a NULL sendbuf where a block is expected. */
    size_t sc[64] = {0}, rc[64] = {0};
    sc[rank] = 2;
    rc[rank] = 1;
    EXPECT_ARG(braid_alltoallv(a, sc, dsp, b, rc, dsp, BRAID_FLOAT32, comm), "sendcounts[");
    MP_CHECK(rank, strstr(braid_last_error(), "recvcounts["), "%s", braid_last_error());
    sc[rank] = 1;
    rc[rank] = 2;
    EXPECT_ARG(braid_alltoallv(a, sc, dsp, a, rc, dsp, BRAID_FLOAT32, comm), "sendcounts[");
    sc[rank] = 0;
    rc[rank] = 4;
    EXPECT_ARG(braid_alltoallv(NULL, sc, dsp, b, rc, dsp, BRAID_FLOAT32, comm), "recvcounts[");
    EXPECT_ARG(braid_gather(a, b, 1, BRAID_FLOAT32, n, comm), "root=");
    EXPECT_ARG(braid_scatter(a, b, 1, BRAID_FLOAT32, -1, comm), "root=-1");
    EXPECT_ARG(braid_igather(a, b, 1, BRAID_FLOAT32, 0, comm, NULL), "req_p");
    EXPECT_ARG(braid_allgatherv(a, 1, b, NULL, dsp, BRAID_FLOAT32, comm), "recvcounts");
    EXPECT_ARG(braid_allgatherv(a, 1, b, cnt, NULL, BRAID_FLOAT32, comm), "displs");
    EXPECT_ARG(braid_allgatherv(a, 2, b, cnt, dsp, BRAID_FLOAT32, comm), "sendcount=2");
    EXPECT_ARG(braid_reduce_scatterv(a, b, cnt, BRAID_FLOAT32, (braid_redop_t)17, comm), "op=");
    EXPECT_ARG(braid_reduce_scatterv(a, b, NULL, BRAID_FLOAT32, BRAID_SUM, comm), "recvcounts");
    EXPECT_ARG(braid_alltoall(a, b, 1, BRAID_FLOAT32, NULL), "comm");
    /* inside a group: reported at group end naming the call */
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_alltoall(a, b, 1, BRAID_FLOAT32, comm));
    r = braid_gather(a, b, 1, BRAID_FLOAT32, n + 3, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "gather in group: %s", braid_strerror(r));
    r = braid_group_end();
    MP_CHECK(rank,
             r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "group call 2 (gather)"),
             "%s", braid_last_error());
    /* still usable: nothing ran */
    for (int i = 0; i < n; i++)
        a[i] = (float)(rank * 10 + i);
    MP_OK(rank, braid_alltoall(a, b, 1, BRAID_FLOAT32, comm));
    for (int i = 0; i < n; i++)
        MP_CHECK(rank, b[i] == (float)(i * 10 + rank), "alltoall after errors: b[%d]=%g", i, b[i]);
    return 0;
}

Test(coll_p2p, argument_errors_name_the_argument, .timeout = 60)
{
    cr_assert_eq(mp_run(1, arg_errors, NULL, 30), 0);
    cr_assert_eq(mp_run(3, arg_errors, NULL, 30), 0);
}

/* Receive blocks that overlap are refused (rank-local, before anything is sent), naming both
 * blocks; empty blocks overlap nothing, so the same displacement with a zero count works. */
static int recv_overlap(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int32_t a[48], b[48];
    size_t sc[3] = {4, 4, 4}, sd[3] = {0, 4, 8}, rc[3] = {4, 4, 4}, rd[3] = {0, 0, 0};
    braid_result_t r;
    for (int i = 0; i < 48; i++)
        a[i] = rank * 100 + i;
    EXPECT_ARG(braid_alltoallv(a, sc, sd, b, rc, rd, BRAID_INT32, comm), "overlap");
    MP_CHECK(rank,
             strstr(braid_last_error(), "rdispls[0]=0") &&
                 strstr(braid_last_error(), "rdispls[1]=0"),
             "%s", braid_last_error());
    size_t part[3] = {0, 3, 8}; /* rank 1's block starts inside rank 0's */
    EXPECT_ARG(braid_alltoallv(a, sc, sd, b, rc, part, BRAID_INT32, comm), "rdispls[1]=3");
    size_t wide[3] = {10, 2, 2}, in[3] = {2, 0, 8}; /* rank 2's inside rank 0's, not 1's */
    EXPECT_ARG(braid_alltoallv(a, sc, sd, b, wide, in, BRAID_INT32, comm), "rdispls[2]=8");
    MP_CHECK(rank, strstr(braid_last_error(), "rdispls[0]=2"), "%s", braid_last_error());
    size_t gc[3] = {2, 2, 2}, gd[3] = {4, 0, 1};
    EXPECT_ARG(braid_allgatherv(a, 2, b, gc, gd, BRAID_INT32, comm), "displs[2]=1");
    /* Rank 1 sends nothing and its empty block sits at 0, where rank 0's lands. */
    for (int i = 0; i < n; i++) {
        sc[i] = rank == 1 ? 0 : 4;
        sd[i] = (size_t)i * 4;
        rc[i] = i == 1 ? 0 : 4;
        rd[i] = i == 1 ? 0 : (size_t)i * 4;
    }
    memset(b, 0, sizeof(b));
    MP_OK(rank, braid_alltoallv(a, sc, sd, b, rc, rd, BRAID_INT32, comm));
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < rc[i]; k++)
            MP_CHECK(rank, b[rd[i] + k] == i * 100 + rank * 4 + (int)k, "b[%zu]=%d from rank %d",
                     rd[i] + k, b[rd[i] + k], i);
    return 0;
}

Test(coll_p2p, overlapping_receive_blocks_are_refused, .timeout = 60)
{
    cr_assert_eq(mp_run(3, recv_overlap, NULL, 30), 0);
}

typedef struct {
    int kind;
    const char *a, *b; /* both must appear in the message of every rank that reports it */
} mm_t;

/* Rank 0 calls one thing, the others another; the rank that receives the odd message fails, and
 * every rank that fails gets MISMATCH naming both calls, or REMOTE from a peer that did. A rank
 * whose part was only sends may complete (its messages were buffered). */
static int mismatch(braid_comm_t comm, int rank, int n, void *arg)
{
    const mm_t *m = arg;
    float a[256] = {0}, b[256];
    size_t sc[16], sd[16], rc[16], rd[16];
    for (int i = 0; i < n; i++) {
        sc[i] = rc[i] = 2;
        sd[i] = rd[i] = (size_t)i * 4;
    }
    braid_result_t r;
    switch (m->kind) {
    case 0: /* alltoall vs gather */
        r = rank == 0 ? braid_alltoall(a, b, 2, BRAID_FLOAT32, comm)
                      : braid_gather(a, b, 2, BRAID_FLOAT32, 0, comm);
        break;
    case 1: /* alltoall vs allreduce (another family of connections) */
        r = rank == 0 ? braid_alltoall(a, b, 2, BRAID_FLOAT32, comm)
                      : braid_allreduce(a, b, 2, BRAID_FLOAT32, BRAID_SUM, comm);
        break;
    case 2: /* alltoallv: rank 0 sends 3 to everyone, they expect 2 */
        if (rank == 0)
            for (int i = 1; i < n; i++)
                sc[i] = 3;
        r = braid_alltoallv(a, sc, sd, b, rc, rd, BRAID_FLOAT32, comm);
        break;
    default: /* a small send against an alltoall on the peer */
        if (rank == 0) {
            MP_OK(rank, braid_send(a, 2, BRAID_FLOAT32, 1, comm)); /* buffered */
            r = braid_alltoall(a, b, 2, BRAID_FLOAT32, comm);
        } else {
            r = braid_alltoall(a, b, 2, BRAID_FLOAT32, comm);
        }
        break;
    }
    const char *msg = braid_last_error();
    fprintf(stderr, "rank %d: %s: %s\n", rank, braid_strerror(r), msg);
    int must = m->kind >= 2 ? 1 : 0; /* the rank that receives the odd message */
    MP_CHECK(rank,
             r == BRAID_ERR_MISMATCH || r == BRAID_ERR_REMOTE ||
                 (rank != must && r == BRAID_SUCCESS),
             "got %s", braid_strerror(r));
    if (r == BRAID_ERR_MISMATCH)
        MP_CHECK(rank, strstr(msg, m->a) && strstr(msg, m->b), "'%s' lacks '%s' or '%s'", msg, m->a,
                 m->b);
    return 0;
}

Test(coll_p2p, mismatches_name_both_calls, .timeout = 120)
{
    setenv("BRAID_TIMEOUT", "10", 1);
    mm_t cases[] = {{0, "alltoall #1", "gather #1"},
                    {1, "alltoall #1", "allreduce #1"},
                    {2, "count 3", "count 2"},
                    {3, "send #1 to rank 1", "alltoall #1"}};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(mp_run(2, mismatch, &cases[i], 60), 0, "case %d n=2", i);
        cr_assert_eq(mp_run(3, mismatch, &cases[i], 60), 0, "case %d n=3", i);
    }
}
