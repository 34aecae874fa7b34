/* A rank program for the multi-host tests (tests/net/run_net_tests.sh starts it in network
 * namespaces through tests/net/netns.sh). It uses the public API only and
 * braid_comm_init_env (BRAID_RANK, BRAID_NRANKS, BRAID_ROOT, BRAID_SECRET).
 *
 *   net_check coll [ROUNDS]   allreduce (several dtypes, ops and counts up to 8 MiB),
 *                             broadcast, reduce, reduce_scatter, allgather, checked exactly; exit 0
 *                             if every result is right
 *   net_check victim R [IT [any]]  1 MiB allreduces in a loop; rank R kills itself (SIGKILL)
 *                             at iteration IT (default 10); every other rank must get
 *                             BRAID_ERR_REMOTE naming "rank R" (any: naming some
 *                             rank)
 *                             within 5 s of its last successful call; exit 0 if so
 *
 *   net_check p2p [ROUNDS]    braid_send/recv: a ring and every pair (self too) in groups posted
 *                             in opposite orders, isend/irecv without a group; alltoall,
 *                             alltoallv (uneven, zero counts), gather, scatter, allgatherv,
 *                             reduce_scatterv; every result checked exactly
 *   net_check recvvictim R    every rank but R receives from R, which SIGKILLs itself: each must
 *                             get BRAID_ERR_REMOTE naming "rank R" within 5 s
 *
 * Inputs depend on (rank, index): small integers, so every sum is exact in any dtype. */
#define _GNU_SOURCE
#include "braid/braid.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank_, nranks_;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "net_check rank %d: ", rank_);                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define OK(call)                                                                                   \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        CHECK(r_ == BRAID_SUCCESS, "%s: %s: %s", #call, braid_strerror(r_), braid_last_error());   \
    } while (0)

/* Rank r's input at index i: 0..12, minus 6 for signed types. */
static long value(int r, size_t i, int seed)
{
    return (long)((i * 2654435761u + (size_t)r * 40503u + (size_t)seed * 977u) >> 7) % 13;
}

static void fill(void *buf, braid_datatype_t dt, int r, size_t base, size_t n, int seed)
{
    for (size_t k = 0; k < n; k++) {
        long v = value(r, base + k, seed);
        switch (dt) {
        case BRAID_INT32:
            ((int32_t *)buf)[k] = (int32_t)(v - 6);
            break;
        case BRAID_UINT8:
            ((uint8_t *)buf)[k] = (uint8_t)v;
            break;
        case BRAID_INT64:
            ((int64_t *)buf)[k] = v - 6;
            break;
        case BRAID_FLOAT32:
            ((float *)buf)[k] = (float)(v - 6);
            break;
        case BRAID_FLOAT64:
            ((double *)buf)[k] = (double)(v - 6);
            break;
        default:
            break;
        }
    }
}

static double get(const void *buf, braid_datatype_t dt, size_t k)
{
    switch (dt) {
    case BRAID_INT32:
        return ((const int32_t *)buf)[k];
    case BRAID_UINT8:
        return ((const uint8_t *)buf)[k];
    case BRAID_INT64:
        return (double)((const int64_t *)buf)[k];
    case BRAID_FLOAT32:
        return ((const float *)buf)[k];
    case BRAID_FLOAT64:
        return ((const double *)buf)[k];
    default:
        return 0;
    }
}

static double in_value(braid_datatype_t dt, int r, size_t i, int seed)
{
    long v = value(r, i, seed);
    return dt == BRAID_UINT8 ? (double)v : (double)(v - 6);
}

static double expect(braid_datatype_t dt, braid_redop_t op, size_t i, int seed)
{
    double acc = in_value(dt, 0, i, seed);
    for (int r = 1; r < nranks_; r++) {
        double v = in_value(dt, r, i, seed);
        if (op == BRAID_SUM) acc += v;
        if (op == BRAID_MIN && v < acc) acc = v;
        if (op == BRAID_MAX && v > acc) acc = v;
    }
    if (dt == BRAID_UINT8) acc = (double)((long)acc & 0xff);
    return acc;
}

static int coll(braid_comm_t comm, int rounds)
{
    braid_datatype_t dts[] = {BRAID_INT32, BRAID_UINT8, BRAID_INT64, BRAID_FLOAT32, BRAID_FLOAT64};
    size_t counts[] = {0, 1, 7, 1009, 65537, 300007, (8u << 20) / 4};
    int seed = 1;
    size_t maxb = ((8u << 20) + 64) * (size_t)nranks_;
    char *a = malloc(maxb), *b = malloc(maxb);
    CHECK(a && b, "out of memory");
    for (int round = 0; round < rounds; round++) {
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
            for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++, seed++) {
                braid_datatype_t dt = dts[di];
                size_t n = counts[ci], es = braid_dtype_size(dt);
                if (n * es > (8u << 20)) n = (8u << 20) / es;
                braid_redop_t op = (braid_redop_t)(seed % 3 == 0   ? BRAID_SUM
                                                   : seed % 3 == 1 ? BRAID_MIN
                                                                   : BRAID_MAX);
                if (dt == BRAID_UINT8) op = BRAID_MAX;
                fill(a, dt, rank_, 0, n, seed);
                OK(braid_allreduce(a, b, n, dt, op, comm));
                for (size_t k = 0; k < n; k++)
                    CHECK(get(b, dt, k) == expect(dt, op, k, seed),
                          "allreduce %s %s count %zu: [%zu] = %g, want %g", braid_dtype_name(dt),
                          braid_op_name(op), n, k, get(b, dt, k), expect(dt, op, k, seed));
                if (n > 300007) continue;
                int root = (int)(seed % nranks_);
                fill(a, dt, rank_, 0, n, seed);
                OK(braid_broadcast(a, b, n, dt, root, comm));
                for (size_t k = 0; k < n; k++)
                    CHECK(get(b, dt, k) == in_value(dt, root, k, seed),
                          "broadcast root %d %s count %zu: wrong [%zu]", root, braid_dtype_name(dt),
                          n, k);
                /* reduce to another root; the other ranks pass no output */
                int rroot = (int)((seed + 1) % nranks_);
                fill(a, dt, rank_, 0, n, seed);
                OK(braid_reduce(a, rank_ == rroot ? b : NULL, n, dt, op, rroot, comm));
                for (size_t k = 0; rank_ == rroot && k < n; k++)
                    CHECK(get(b, dt, k) == expect(dt, op, k, seed),
                          "reduce root %d %s %s count %zu: [%zu] = %g, want %g", rroot,
                          braid_dtype_name(dt), braid_op_name(op), n, k, get(b, dt, k),
                          expect(dt, op, k, seed));
                fill(a, dt, rank_, 0, n * (size_t)nranks_, seed);
                OK(braid_reduce_scatter(a, b, n, dt, BRAID_MAX, comm));
                for (size_t k = 0; k < n; k++)
                    CHECK(get(b, dt, k) == expect(dt, BRAID_MAX, (size_t)rank_ * n + k, seed),
                          "reduce_scatter %s count %zu: wrong [%zu]", braid_dtype_name(dt), n, k);
                fill(a, dt, rank_, 0, n, seed);
                OK(braid_allgather(a, b, n, dt, comm));
                for (int r = 0; r < nranks_; r++)
                    for (size_t k = 0; k < n; k++)
                        CHECK(get(b, dt, (size_t)r * n + k) == in_value(dt, r, k, seed),
                              "allgather %s count %zu: wrong block %d [%zu]", braid_dtype_name(dt),
                              n, r, k);
            }
        }
        OK(braid_barrier(comm));
    }
    free(a);
    free(b);
    printf("net_check rank %d of %d: all collectives correct\n", rank_, nranks_);
    return 0;
}

static int victim(braid_comm_t comm, int v, int kill_at, int any)
{
    size_t n = 1 << 18;
    float *buf = calloc(n, sizeof(float));
    CHECK(buf, "out of memory");
    braid_result_t res = BRAID_SUCCESS;
    double t = 0;
    for (int it = 0; res == BRAID_SUCCESS && it < 1000000; it++) {
        if (rank_ == v && it == kill_at) raise(SIGKILL);
        double t0 = now_s();
        res = braid_allreduce(buf, buf, n, BRAID_FLOAT32, BRAID_SUM, comm);
        t = now_s() - t0;
    }
    char name[32];
    snprintf(name, sizeof(name), "rank %d", v);
    printf("net_check rank %d: %s after %.3f s in the failing call: %s\n", rank_,
           braid_strerror(res), t, braid_last_error());
    CHECK(res == BRAID_ERR_REMOTE, "got %s, want a remote error", braid_strerror(res));
    CHECK(strstr(braid_last_error(), any ? "rank " : name), "the message does not name %s",
          any ? "a rank" : name);
    CHECK(t < 5.0, "the failing call took %.2f s", t);
    free(buf);
    return 0;
}

/* All-reduces in a loop until the link to another host goes down (netns.sh --link-down):
 * every rank must fail within BRAID_TIMEOUT (+ slack) with a timeout or remote error that
 * names a rank, never hang. */
static int linkdown(braid_comm_t comm, double timeout_s)
{
    size_t n = 1 << 16;
    float *buf = calloc(n, sizeof(float));
    CHECK(buf, "out of memory");
    braid_result_t res = BRAID_SUCCESS;
    double t = 0;
    for (int it = 0; res == BRAID_SUCCESS && it < 100000000; it++) {
        double t0 = now_s();
        res = braid_allreduce(buf, buf, n, BRAID_FLOAT32, BRAID_SUM, comm);
        t = now_s() - t0;
    }
    printf("net_check rank %d: %s after %.3f s in the failing call: %s\n", rank_,
           braid_strerror(res), t, braid_last_error());
    CHECK(res == BRAID_ERR_TIMEOUT || res == BRAID_ERR_REMOTE, "got %s", braid_strerror(res));
    CHECK(strstr(braid_last_error(), "rank "), "the message names no rank");
    CHECK(t < timeout_s + 3.0, "the failing call took %.2f s", t);
    free(buf);
    return 0;
}

/* Point-to-point and the collectives on it. Data of sender s for receiver d at index i:
 * value(s, i, seed + d). */
static int check_from(const void *got, braid_datatype_t dt, int s, size_t base, size_t n, int seed,
                      const char *what)
{
    for (size_t k = 0; k < n; k++)
        CHECK(get(got, dt, k) == in_value(dt, s, base + k, seed),
              "%s: from rank %d [%zu] = %g, "
              "want %g",
              what, s, k, get(got, dt, k), in_value(dt, s, base + k, seed));
    return 0;
}

static int p2p(braid_comm_t comm, int rounds)
{
    int n = nranks_, me = rank_, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t counts[] = {0, 1, 1009, 300007};
    braid_datatype_t dts[] = {BRAID_INT32, BRAID_UINT8, BRAID_FLOAT64};
    size_t maxb = 300007 * 8 * (size_t)n + 64;
    char *a = malloc(maxb), *b = malloc(maxb);
    size_t *sc = calloc((size_t)n * 5, sizeof(size_t)), *sd = sc + n, *rc = sc + 2 * n,
           *rd = sc + 3 * n, *tmp = sc + 4 * n;
    CHECK(a && b && sc, "out of memory");
    int seed = 100;
    for (int round = 0; round < rounds; round++)
        for (size_t ci = 0; ci < 4; ci++)
            for (size_t di = 0; di < 3; di++, seed += 64) {
                braid_datatype_t dt = dts[di];
                size_t c = counts[ci], es = braid_dtype_size(dt), blk = c * es;
                /* ring, receive first on odd ranks */
                fill(a, dt, me, 0, c, seed + next);
                OK(braid_group_start());
                if (me & 1) OK(braid_recv(b, c, dt, prev, comm));
                OK(braid_send(a, c, dt, next, comm));
                if (!(me & 1)) OK(braid_recv(b, c, dt, prev, comm));
                OK(braid_group_end());
                if (check_from(b, dt, prev, 0, c, seed + me, "ring")) return 1;
                /* every pair, self too: sends first on even ranks, receives first on odd */
                if (c > 1009) c = 1009, blk = c * es;
                for (int d = 0; d < n; d++)
                    fill(a + (size_t)d * blk, dt, me, 0, c, seed + d);
                OK(braid_group_start());
                for (int k = 0; k < 2 * n; k++) {
                    int j = (me & 1) ? (k + n) % (2 * n) : k;
                    if (j < n)
                        OK(braid_send(a + (size_t)j * blk, c, dt, j, comm));
                    else
                        OK(braid_recv(b + (size_t)(j - n) * blk, c, dt, j - n, comm));
                }
                OK(braid_group_end());
                for (int s = 0; s < n; s++)
                    if (check_from(b + (size_t)s * blk, dt, s, 0, c, seed + me, "pairs")) return 1;
                /* isend / irecv, no group */
                braid_request_t q[2];
                fill(a, dt, me, 0, c, seed + 1 + next);
                OK(braid_isend(a, c, dt, next, comm, &q[0]));
                OK(braid_irecv(b, c, dt, prev, comm, &q[1]));
                OK(braid_wait(q[0]));
                OK(braid_wait(q[1]));
                if (check_from(b, dt, prev, 0, c, seed + 1 + me, "isend/irecv")) return 1;
                /* alltoall: block d of rank s is value(s, d*c + i, seed + 2) */
                fill(a, dt, me, 0, c * (size_t)n, seed + 2);
                OK(braid_alltoall(a, b, c, dt, comm));
                for (int s = 0; s < n; s++)
                    if (check_from(b + (size_t)s * blk, dt, s, (size_t)me * c, c, seed + 2,
                                   "alltoall"))
                        return 1;
                /* alltoallv: rank s sends (s + d) % 3 * c / 2 elements to d */
                size_t so = 0, ro = 0;
                for (int d = 0; d < n; d++) {
                    sc[d] = (size_t)((me + d) % 3) * c / 2;
                    rc[d] = (size_t)((d + me) % 3) * c / 2;
                    sd[d] = so;
                    rd[d] = ro;
                    so += sc[d];
                    ro += rc[d];
                }
                for (int d = 0; d < n; d++)
                    fill(a + sd[d] * es, dt, me, 0, sc[d], seed + 3 + d);
                OK(braid_alltoallv(a, sc, sd, b, rc, rd, dt, comm));
                for (int s = 0; s < n; s++)
                    if (check_from(b + rd[s] * es, dt, s, 0, rc[s], seed + 3 + me, "alltoallv"))
                        return 1;
                /* gather to and scatter from root */
                int root = seed / 64 % n;
                fill(a, dt, me, 0, c, seed + 4);
                OK(braid_gather(a, b, c, dt, root, comm));
                for (int s = 0; me == root && s < n; s++)
                    if (check_from(b + (size_t)s * blk, dt, s, 0, c, seed + 4, "gather")) return 1;
                fill(a, dt, me, 0, c * (size_t)n, seed + 5);
                OK(braid_scatter(a, b, c, dt, root, comm));
                if (check_from(b, dt, root, (size_t)me * c, c, seed + 5, "scatter")) return 1;
                /* allgatherv with rank-dependent counts, reduce_scatterv (max) */
                size_t tot = 0;
                for (int r = 0; r < n; r++) {
                    tmp[r] = (size_t)(r % 2) * c + (size_t)r;
                    rd[r] = tot;
                    tot += tmp[r];
                }
                fill(a, dt, me, 0, tmp[me], seed + 6);
                OK(braid_allgatherv(a, tmp[me], b, tmp, rd, dt, comm));
                for (int s = 0; s < n; s++)
                    if (check_from(b + rd[s] * es, dt, s, 0, tmp[s], seed + 6, "allgatherv"))
                        return 1;
                fill(a, dt, me, 0, tot, seed + 7);
                OK(braid_reduce_scatterv(a, b, tmp, dt, BRAID_MAX, comm));
                for (size_t k = 0; k < tmp[me]; k++)
                    CHECK(get(b, dt, k) == expect(dt, BRAID_MAX, rd[me] + k, seed + 7),
                          "reduce_scatterv [%zu] = %g, want %g", k, get(b, dt, k),
                          expect(dt, BRAID_MAX, rd[me] + k, seed + 7));
            }
    free(a);
    free(b);
    free(sc);
    printf("net_check rank %d of %d: point-to-point and alltoall correct\n", rank_, nranks_);
    return 0;
}

/* Every rank receives from rank v, which kills itself instead of sending. */
static int recvvictim(braid_comm_t comm, int v)
{
    float buf[64];
    OK(braid_barrier(comm));
    if (rank_ == v) {
        usleep(300 * 1000);
        raise(SIGKILL);
    }
    double t0 = now_s();
    braid_result_t res = braid_recv(buf, 64, BRAID_FLOAT32, v, comm);
    double t = now_s() - t0;
    char name[32];
    snprintf(name, sizeof(name), "rank %d", v);
    printf("net_check rank %d: %s after %.3f s in recv: %s\n", rank_, braid_strerror(res), t,
           braid_last_error());
    CHECK(res == BRAID_ERR_REMOTE, "got %s, want a remote error", braid_strerror(res));
    CHECK(strstr(braid_last_error(), name), "the message does not name %s", name);
    CHECK(t < 5.3, "the failing call took %.2f s", t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 ||
        (strcmp(argv[1], "coll") && strcmp(argv[1], "victim") && strcmp(argv[1], "linkdown") &&
         strcmp(argv[1], "p2p") && strcmp(argv[1], "recvvictim")) ||
        ((!strcmp(argv[1], "victim") || !strcmp(argv[1], "recvvictim")) && argc < 3)) {
        fprintf(stderr, "usage: net_check coll|p2p [ROUNDS] | net_check victim RANK [ITER [any]] | "
                        "net_check recvvictim RANK\n");
        return 2;
    }
    braid_comm_t comm;
    braid_result_t r = braid_comm_init_env(&comm);
    if (r) {
        fprintf(stderr, "net_check: braid_comm_init_env: %s: %s\n", braid_strerror(r),
                braid_last_error());
        return 1;
    }
    braid_comm_rank(comm, &rank_);
    braid_comm_size(comm, &nranks_);
    int rc;
    if (!strcmp(argv[1], "coll"))
        rc = coll(comm, argc > 2 ? atoi(argv[2]) : 1);
    else if (!strcmp(argv[1], "p2p"))
        rc = p2p(comm, argc > 2 ? atoi(argv[2]) : 1);
    else if (!strcmp(argv[1], "recvvictim"))
        rc = recvvictim(comm, atoi(argv[2]));
    else if (!strcmp(argv[1], "linkdown"))
        rc = linkdown(comm, argc > 2 ? atof(argv[2]) : 3.0);
    else
        rc = victim(comm, atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 10,
                    argc > 4 && !strcmp(argv[4], "any"));
    braid_comm_destroy(comm);
    return rc;
}
