/* perf_selftest: tests of the perf harness that need no working library.
 *
 * A private fake backend runs N ranks as threads of one process and implements every collective
 * with braid's documented semantics (integers wrap; float16/bfloat16 combine in float32 and round
 * to nearest even after each pair; avg scales float16/bfloat16/float8 by 1/n first and divides
 * the other dtypes' sum at the end, integers truncating), so
 * the whole loop of bench.c (geometry, in-place offsets, shifts, checks, -a, output) runs here.
 *
 *   perf_selftest                    unit tests + every collective, dtype and op on 1..4 ranks
 *   perf_selftest run N COLL [flags] one fake run with the tools' flags, output shown
 *                                    (COLL: all_reduce broadcast reduce reduce_scatter all_gather;
 *                                    FAKE_BUG=1 corrupts one element to see the check fail) */
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_MAX_RANKS 16

static int failures;
#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                    \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- reference element arithmetic (braid's semantics) -------------------------------------- */

static int is_float(int dt)
{
    return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 || dt == BRAID_FLOAT32 ||
           dt == BRAID_FLOAT64 || dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static int is_unsigned(int dt)
{
    return dt == BRAID_UINT8 || dt == BRAID_UINT32 || dt == BRAID_UINT64;
}

static int64_t load_i(int dt, const void *p, size_t i)
{
    switch (dt) {
    case BRAID_INT8:
        return ((const int8_t *)p)[i];
    case BRAID_UINT8:
        return ((const uint8_t *)p)[i];
    case BRAID_INT32:
        return ((const int32_t *)p)[i];
    case BRAID_UINT32:
        return ((const uint32_t *)p)[i];
    default:
        return ((const int64_t *)p)[i];
    }
}

static void store_i(int dt, void *p, size_t i, int64_t v)
{
    switch (dt) {
    case BRAID_INT8:
    case BRAID_UINT8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    case BRAID_INT32:
    case BRAID_UINT32:
        ((uint32_t *)p)[i] = (uint32_t)v;
        break;
    default:
        ((uint64_t *)p)[i] = (uint64_t)v;
        break;
    }
}

static double load_f(int dt, const void *p, size_t i)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return perf_half_to_float(((const uint16_t *)p)[i]);
    case BRAID_BFLOAT16:
        return perf_bf16_to_float(((const uint16_t *)p)[i]);
    case BRAID_FLOAT32:
        return ((const float *)p)[i];
    case BRAID_FLOAT8_E4M3:
        return perf_e4m3_to_float(((const uint8_t *)p)[i]);
    case BRAID_FLOAT8_E5M2:
        return perf_e5m2_to_float(((const uint8_t *)p)[i]);
    default:
        return ((const double *)p)[i];
    }
}

/* Rounds to the dtype (float16/bfloat16 through float32, as braid). */
static double round_f(int dt, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return perf_half_to_float(perf_float_to_half((float)v));
    case BRAID_BFLOAT16:
        return perf_bf16_to_float(perf_float_to_bf16((float)v));
    case BRAID_FLOAT32:
        return (float)v;
    case BRAID_FLOAT8_E4M3:
        return perf_e4m3_to_float(perf_float_to_e4m3((float)v));
    case BRAID_FLOAT8_E5M2:
        return perf_e5m2_to_float(perf_float_to_e5m2((float)v));
    default:
        return v;
    }
}

static void store_f(int dt, void *p, size_t i, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        ((uint16_t *)p)[i] = perf_float_to_half((float)v);
        break;
    case BRAID_BFLOAT16:
        ((uint16_t *)p)[i] = perf_float_to_bf16((float)v);
        break;
    case BRAID_FLOAT32:
        ((float *)p)[i] = (float)v;
        break;
    case BRAID_FLOAT8_E4M3:
        ((uint8_t *)p)[i] = perf_float_to_e4m3((float)v);
        break;
    case BRAID_FLOAT8_E5M2:
        ((uint8_t *)p)[i] = perf_float_to_e5m2((float)v);
        break;
    default:
        ((double *)p)[i] = v;
        break;
    }
}

/* avg's pre-scaling of float16/bfloat16/float8 (braid.h): v times (float)(1/n), the product
 * rounded to float32, then to the dtype; other dtypes divide the sum instead. */
static int avg_prescales(int dt)
{
    return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 || dt == BRAID_FLOAT8_E4M3 ||
           dt == BRAID_FLOAT8_E5M2;
}

static double avg_scaled(int dt, int n, double v)
{
    return round_f(dt, (float)(v * (double)(float)(1.0 / n)));
}

/* dst[di] = src[0][off] op src[1][off] op ... (rank order); avg: float16/bfloat16/float8
 * scaled by 1/n first, the others divided at the end. */
static void ref_reduce(int dt, int op, int n, const void *const *src, size_t off, void *dst,
                       size_t di)
{
    int mul = op == PERF_OP_MULSUM; /* each rank's input times its scalar (exact) */
    if (is_float(dt)) {
        double acc = load_f(dt, src[0], off) * (mul ? perf_mulsum_scalar(0) : 1);
        int pre = op == BRAID_AVG && avg_prescales(dt);
        if (pre) acc = avg_scaled(dt, n, acc);
        for (int r = 1; r < n; r++) {
            double v = load_f(dt, src[r], off) * (mul ? perf_mulsum_scalar(r) : 1);
            if (pre) v = avg_scaled(dt, n, v);
            switch (op) {
            case BRAID_PROD:
                acc = acc * v;
                break;
            case BRAID_MIN:
                acc = v < acc ? v : acc;
                break;
            case BRAID_MAX:
                acc = v > acc ? v : acc;
                break;
            default:
                acc = acc + v;
                break;
            }
            if (dt != BRAID_FLOAT64) acc = (float)acc; /* float32 compute type */
            acc = round_f(dt, acc);
        }
        if (op == BRAID_AVG && !pre)
            acc = dt == BRAID_FLOAT64 ? acc / n : (double)((float)acc / (float)n);
        store_f(dt, dst, di, acc);
        return;
    }
    uint8_t tmp[8];
    int64_t acc = load_i(dt, src[0], off) * (mul ? perf_mulsum_scalar(0) : 1);
    for (int r = 1; r < n; r++) {
        int64_t v = load_i(dt, src[r], off) * (mul ? perf_mulsum_scalar(r) : 1);
        int lt = is_unsigned(dt) ? (uint64_t)v < (uint64_t)acc : v < acc;
        switch (op) {
        case BRAID_PROD:
            acc = (int64_t)((uint64_t)acc * (uint64_t)v);
            break;
        case BRAID_MIN:
            acc = lt ? v : acc;
            break;
        case BRAID_MAX:
            acc = lt ? acc : v;
            break;
        default:
            acc = (int64_t)((uint64_t)acc + (uint64_t)v);
            break;
        }
        store_i(dt, tmp, 0, acc); /* wrap to the dtype */
        acc = load_i(dt, tmp, 0);
    }
    if (op == BRAID_AVG) acc = is_unsigned(dt) ? (int64_t)((uint64_t)acc / (uint64_t)n) : acc / n;
    store_i(dt, dst, di, acc);
}

/* ---- the fake backend: ranks are threads ---------------------------------------------------- */

typedef struct {
    int n, bug;
    pthread_barrier_t bar;
    struct {
        const void *send;
        int64_t i64;
        double f64;
    } post[FAKE_MAX_RANKS];
} fake_world_t;

typedef struct {
    fake_world_t *w;
    char *tmp;
    size_t cap;
} fake_ctx_t;

static void sync_all(fake_world_t *w)
{
    pthread_barrier_wait(&w->bar);
}

static int fake_start(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                      size_t count, int dt, int op, int root, int nonblocking)
{
    fake_ctx_t *c = b->ctx;
    fake_world_t *w = c->w;
    int me = b->rank, n = b->nranks;
    size_t ts = perf_dtype_size(dt);
    int many = coll->kind == PERF_ALLGATHER || coll->kind == PERF_ALLTOALL ||
               coll->kind == PERF_GATHER || coll->kind == PERF_HYPERCUBE;
    size_t out = many ? count * (size_t)n : count;
    (void)nonblocking;
    if (out * ts > c->cap) {
        free(c->tmp);
        c->cap = out * ts;
        c->tmp = malloc(c->cap);
        if (!c->tmp) return -1;
    }
    w->post[me].send = send;
    sync_all(w);
    const void *src[FAKE_MAX_RANKS];
    for (int r = 0; r < n; r++)
        src[r] = w->post[r].send;
    switch (coll->kind) {
    case PERF_ALLREDUCE:
    case PERF_REDUCE:
        for (size_t i = 0; i < count; i++)
            ref_reduce(dt, op, n, src, i, c->tmp, i);
        break;
    case PERF_REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++)
            ref_reduce(dt, op, n, src, (size_t)me * count + i, c->tmp, i);
        break;
    case PERF_BROADCAST:
        memcpy(c->tmp, src[root], count * ts);
        break;
    case PERF_ALLGATHER:
    case PERF_GATHER:
    case PERF_HYPERCUBE:
        for (int q = 0; q < n; q++)
            memcpy(c->tmp + (size_t)q * count * ts, src[q], count * ts);
        break;
    case PERF_ALLTOALL: /* block q from rank q's block me */
        for (int q = 0; q < n; q++)
            memcpy(c->tmp + (size_t)q * count * ts, (const char *)src[q] + (size_t)me * count * ts,
                   count * ts);
        break;
    case PERF_SCATTER:
        memcpy(c->tmp, (const char *)src[root] + (size_t)me * count * ts, count * ts);
        break;
    case PERF_SENDRECV:
        memcpy(c->tmp, src[(me + n - 1) % n], count * ts);
        break;
    }
    if (w->bug && me == n - 1 && out > 2) c->tmp[ts] ^= 0x10; /* element 1, last rank */
    sync_all(w);
    if ((coll->kind != PERF_REDUCE && coll->kind != PERF_GATHER) || me == root)
        memcpy(recv, c->tmp, out * ts);
    sync_all(w);
    return 0;
}

static int fake_complete(perf_backend_t *b)
{
    (void)b;
    return 0;
}

static int fake_barrier(perf_backend_t *b)
{
    sync_all(((fake_ctx_t *)b->ctx)->w);
    return 0;
}

static int fake_allreduce_f64(perf_backend_t *b, double *v, int op)
{
    fake_world_t *w = ((fake_ctx_t *)b->ctx)->w;
    w->post[b->rank].f64 = *v;
    sync_all(w);
    double acc = w->post[0].f64;
    for (int r = 1; r < b->nranks; r++) {
        double x = w->post[r].f64;
        acc = op == BRAID_MIN ? fmin(acc, x) : op == BRAID_MAX ? fmax(acc, x) : acc + x;
    }
    sync_all(w);
    *v = acc;
    return 0;
}

static int fake_allreduce_i64(perf_backend_t *b, int64_t *v)
{
    fake_world_t *w = ((fake_ctx_t *)b->ctx)->w;
    w->post[b->rank].i64 = *v;
    sync_all(w);
    int64_t acc = 0;
    for (int r = 0; r < b->nranks; r++)
        acc += w->post[r].i64;
    sync_all(w);
    *v = acc;
    return 0;
}

static int fake_allgather_bytes(perf_backend_t *b, const void *mine, void *all, size_t len)
{
    fake_world_t *w = ((fake_ctx_t *)b->ctx)->w;
    w->post[b->rank].send = mine;
    sync_all(w);
    for (int r = 0; r < b->nranks; r++)
        memcpy((char *)all + (size_t)r * len, w->post[r].send, len);
    sync_all(w);
    return 0;
}

static int fake_supports(perf_backend_t *b, const perf_coll_t *coll, int dt, int op)
{
    (void)b, (void)coll, (void)dt, (void)op;
    return 1;
}

typedef struct {
    fake_world_t *w;
    int rank, rc;
    const perf_coll_t *coll;
    const perf_opts_t *opts;
} fake_rank_t;

static void *fake_rank_main(void *arg)
{
    fake_rank_t *fr = arg;
    fake_ctx_t ctx = {.w = fr->w};
    perf_backend_t b = {
        .name = "fake",
        .rank = fr->rank,
        .nranks = fr->w->n,
        .ctx = &ctx,
        .start = fake_start,
        .complete = fake_complete,
        .barrier = fake_barrier,
        .allreduce_f64 = fake_allreduce_f64,
        .allreduce_i64 = fake_allreduce_i64,
        .allgather_bytes = fake_allgather_bytes,
        .supports = fake_supports,
        .device_desc = "fake (threads)",
    };
    fr->rc = perf_bench_run(&b, fr->coll, fr->opts);
    free(ctx.tmp);
    return NULL;
}

/* Runs the bench loop on n thread-ranks; returns the worst exit code. */
static int fake_run(int n, int bug, const perf_coll_t *coll, const perf_opts_t *opts)
{
    fake_world_t w = {.n = n, .bug = bug};
    pthread_t th[FAKE_MAX_RANKS];
    fake_rank_t fr[FAKE_MAX_RANKS];
    pthread_barrier_init(&w.bar, NULL, (unsigned)n);
    for (int r = 0; r < n; r++) {
        fr[r] = (fake_rank_t){.w = &w, .rank = r, .coll = coll, .opts = opts};
        pthread_create(&th[r], NULL, fake_rank_main, &fr[r]);
    }
    int rc = 0;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        if (fr[r].rc > rc) rc = fr[r].rc;
    }
    pthread_barrier_destroy(&w.bar);
    return rc;
}

static const perf_coll_t *const colls[] = {
    &perf_coll_allreduce, &perf_coll_broadcast, &perf_coll_reduce, &perf_coll_reduce_scatter,
    &perf_coll_allgather, &perf_coll_alltoall,  &perf_coll_gather, &perf_coll_scatter,
    &perf_coll_sendrecv,  &perf_coll_hypercube};

static const perf_coll_t *coll_by_name(const char *s)
{
    for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++)
        if (strcmp(colls[i]->name, s) == 0) return colls[i];
    return NULL;
}

/* ---- unit tests ---------------------------------------------------------------------------- */

static void test_conversions(void)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = perf_half_to_float((uint16_t)h);
        if (f != f) continue; /* NaN */
        if (perf_float_to_half(f) != h) {
            fprintf(stderr, "half 0x%04x -> %g does not round-trip\n", h, f);
            failures++;
            break;
        }
        float g = perf_bf16_to_float((uint16_t)h);
        if (g == g && perf_float_to_bf16(g) != h) {
            fprintf(stderr, "bf16 0x%04x -> %g does not round-trip\n", h, g);
            failures++;
            break;
        }
    }
    EXPECT(perf_float_to_half(2049.0f) == perf_float_to_half(2048.0f)); /* tie to even */
    EXPECT(perf_half_to_float(perf_float_to_half(2051.0f)) == 2052.0f);
    EXPECT(perf_half_to_float(perf_float_to_half(65519.0f)) == 65504.0f);
    EXPECT(perf_float_to_half(65520.0f) == 0x7c00);
    EXPECT(perf_float_to_half(-1e-9f) == 0x8000);
    EXPECT(perf_float_to_half(5.9604645e-8f) == 0x0001);
    EXPECT(perf_float_to_half(1.0f) == 0x3c00);
    EXPECT(perf_float_to_bf16(1.0f) == 0x3f80);
    EXPECT(perf_bf16_to_float(perf_float_to_bf16(257.0f)) == 256.0f); /* tie to even */
    EXPECT(perf_bf16_to_float(perf_float_to_bf16(259.0f)) == 260.0f);
    for (uint32_t b = 0; b < 0x100; b++) { /* float8: every finite code round-trips */
        float f = perf_e4m3_to_float((uint8_t)b), g = perf_e5m2_to_float((uint8_t)b);
        if (f == f && perf_float_to_e4m3(f) != b) {
            fprintf(stderr, "e4m3 0x%02x -> %g does not round-trip\n", b, f);
            failures++;
        }
        if (g == g && !isinf(g) && perf_float_to_e5m2(g) != b) {
            fprintf(stderr, "e5m2 0x%02x -> %g does not round-trip\n", b, g);
            failures++;
        }
    }
    EXPECT(perf_e4m3_to_float(0x7e) == 448.0f && perf_float_to_e4m3(1e6f) == 0x7e);
    EXPECT(perf_float_to_e4m3(17.0f) == perf_float_to_e4m3(16.0f)); /* tie to even */
    EXPECT(perf_e5m2_to_float(0x7b) == 57344.0f && perf_float_to_e5m2(INFINITY) == 0x7b);
    EXPECT(perf_e5m2_to_float(0x01) == 0x1p-16f && perf_e4m3_to_float(0x01) == 0x1p-9f);
}

static void test_parsing(void)
{
    EXPECT(perf_parse_size("8") == 8.0);
    EXPECT(perf_parse_size("1K") == 1024.0);
    EXPECT(perf_parse_size("256M") == 256.0 * 1024 * 1024);
    EXPECT(perf_parse_size("1g") == 1024.0 * 1024 * 1024);
    EXPECT(perf_parse_size("1.5k") == 1536.0);
    EXPECT(perf_parse_size("4MB") == 4.0 * 1024 * 1024);
    EXPECT(perf_parse_size("x") < 0);
    EXPECT(perf_parse_size("3Q") < 0);
    EXPECT(perf_dtype_parse("half") == BRAID_FLOAT16);
    EXPECT(perf_dtype_parse("float16") == BRAID_FLOAT16);
    EXPECT(perf_dtype_parse("float") == BRAID_FLOAT32);
    EXPECT(perf_dtype_parse("float64") == BRAID_FLOAT64);
    EXPECT(perf_dtype_parse("all") == PERF_ALL);
    EXPECT(perf_dtype_parse("quad") == -2);
    EXPECT(perf_op_parse("avg") == BRAID_AVG);
    EXPECT(perf_op_parse("mulsum") == PERF_OP_MULSUM &&
           perf_op_parse("premulsum") == PERF_OP_MULSUM);
    EXPECT(strcmp(perf_op_name(PERF_OP_MULSUM), "mulsum") == 0);

    char *argv[] = {"x",  "-b",  "8",  "-e", "128M", "-f", "2",     "-d",      "all",
                    "-o", "max", "-a", "3",  "-n",   "7",  "--csv", "out.csv", NULL};
    perf_opts_t o;
    EXPECT(perf_parse_args(17, argv, &perf_coll_allreduce, &o) == 0);
    EXPECT(o.min_bytes == 8 && o.max_bytes == 128u << 20 && o.step_factor == 2);
    EXPECT(o.dtype == PERF_ALL && o.op == BRAID_MAX && o.average == 3 && o.iters == 7);
    EXPECT(o.warmup_iters == 1 && o.check == 1 && strcmp(o.csv_path, "out.csv") == 0);
    EXPECT(o.blocking == 0 && o.run_cycles == 1 && o.root == 0 && o.unalign == 0);

    /* The flags of nccl-tests 2.19 scripts pass. */
    char *argv2[] = {"x", "-r", "-1", "-z", "3",      "-N", "0",  "-R", "1",  "-u",
                     "3", "-S", "1",  "-J", "o.json", "-M", "1",  "-I", "1",  "-K",
                     "2", "-x", "1",  "-D", "0",      "-V", "16", "-T", "30", NULL};
    EXPECT(perf_parse_args(29, argv2, &perf_coll_broadcast, &o) == 0);
    EXPECT(o.root == PERF_ALL && o.blocking == 3 && o.run_cycles == 0 && o.local_register == 1);
    EXPECT(o.unalign == 3 && o.report_timestamps == 1 && strcmp(o.json_path, "o.json") == 0);
    EXPECT(o.memory_report == 1 && o.per_iter_timing == 1 && o.per_iter_skip == 2);
    EXPECT(o.timeout == 30.0 && o.nnotes == 2); /* -x and -V: accepted with a note */
    char *bad[][3] = {{"x", "-z", "4"},  {"x", "-r", "-2"}, {"x", "-D", "1"},
                      {"x", "-R", "3"},  {"x", "-K", "1"},  {"x", "-I", "2"},
                      {"x", "-N", "-1"}, {"x", "-T", "1K"}, {"x", "-u", "x"}};
    int saved_err = dup(2);
    if (!freopen("/dev/null", "w", stderr)) return;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *args[] = {bad[i][0], bad[i][1], bad[i][2], NULL};
        int prc = perf_parse_args(3, args, &perf_coll_reduce, &o);
        if (prc != -1) {
            fprintf(stdout, "%s %s accepted\n", bad[i][1], bad[i][2]);
            failures++;
        }
    }
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);

    /* nccl-tests' getFloatStr: 2 decimals while they fit, then 1, 0, an exponent. */
    char t[32];
    perf_format_float(t, 7, 12.345);
    EXPECT(strcmp(t, "  12.35") == 0);
    perf_format_float(t, 7, 1234.56);
    EXPECT(strcmp(t, "1234.56") == 0);
    perf_format_float(t, 7, 12345.67);
    EXPECT(strcmp(t, "12345.7") == 0);
    perf_format_float(t, 7, 123456.7);
    EXPECT(strcmp(t, " 123457") == 0);
    perf_format_float(t, 7, 123456789.0);
    EXPECT(strcmp(t, "1.2e+08") == 0);
    perf_format_float(t, 6, 999.994);
    EXPECT(strcmp(t, "999.99") == 0);

    /* -I statistics: nearest-rank p99, population standard deviation. */
    double times[] = {5, 1, 4, 2, 3};
    perf_iter_stats_t st;
    perf_iter_stats(times, 5, &st);
    EXPECT(st.min == 1 && st.max == 5 && st.p50 == 3 && st.p99 == 5 && st.avg == 3);
    EXPECT(fabs(st.stdev - sqrt(2.0)) < 1e-12);
}

static void test_geometry(void)
{
    perf_geom_t g;
    perf_geom(PERF_ALLREDUCE, 1024, 4, 3, &g);
    EXPECT(g.count == 256 && g.size == 1024 && g.recv_ip_off == 0);
    perf_geom(PERF_REDUCE_SCATTER, 1024, 4, 3, &g); /* 256 elements: 85 per rank */
    EXPECT(g.count == 85 && g.send_bytes == 1020 && g.recv_bytes == 340 && g.size == 1020);
    EXPECT(g.recv_ip_off == 340 && g.send_ip_off == 0);
    perf_geom(PERF_ALLGATHER, 1024, 4, 3, &g);
    EXPECT(g.count == 85 && g.send_bytes == 340 && g.recv_bytes == 1020 && g.send_ip_off == 340);
    perf_geom(PERF_ALLGATHER, 8, 4, 4, &g);
    EXPECT(g.count == 0);
    double a, b;
    perf_bw(PERF_ALLREDUCE, 1000000000, 1.0, 4, &a, &b);
    EXPECT(a == 1.0 && b == 1.5);
    perf_bw(PERF_ALLGATHER, 1000000000, 0.5, 4, &a, &b);
    EXPECT(a == 2.0 && b == 1.5);
    perf_bw(PERF_BROADCAST, 1000000000, 1.0, 4, &a, &b);
    EXPECT(a == 1.0 && b == 1.0);
    /* nccl-tests' factors: (n-1)/n for the all-to-all, gather, scatter, hypercube and
     * reduce-scatter, 1 for sendrecv */
    static const perf_coll_kind_t nm1[] = {PERF_ALLTOALL, PERF_GATHER, PERF_SCATTER, PERF_HYPERCUBE,
                                           PERF_REDUCE_SCATTER};
    for (size_t i = 0; i < sizeof(nm1) / sizeof(nm1[0]); i++) {
        perf_bw(nm1[i], 1000000000, 0.5, 4, &a, &b);
        EXPECT(a == 2.0 && b == 1.5);
    }
    perf_bw(PERF_SENDRECV, 1000000000, 0.5, 4, &a, &b);
    EXPECT(a == 2.0 && b == 2.0);
    /* their geometry: all-to-all blocks of a multiple of 16 bytes, hypercube of 4 elements,
     * scatter's in-place receive in the root's block, sendrecv the whole size */
    perf_geom(PERF_ALLTOALL, 1000, 4, 3, &g); /* 250 elements: 83 per rank -> 80 */
    EXPECT(g.count == 80 && g.send_bytes == 960 && g.recv_bytes == 960);
    perf_geom(PERF_HYPERCUBE, 1000, 4, 3, &g); /* 250 / 12 = 20 -> 80 per rank */
    EXPECT(g.count == 80 && g.send_bytes == 320 && g.recv_bytes == 960);
    perf_geom(PERF_SCATTER, 1024, 4, 4, &g);
    EXPECT(g.count == 64 && g.send_bytes == 1024 && g.recv_bytes == 256 && g.recv_ip_off == 256);
    perf_geom(PERF_GATHER, 1024, 4, 4, &g);
    EXPECT(g.count == 64 && g.send_bytes == 256 && g.recv_bytes == 1024 && g.send_ip_off == 256);
    perf_geom(PERF_SENDRECV, 1000, 8, 3, &g);
    EXPECT(g.count == 125 && g.send_bytes == 1000 && g.recv_bytes == 1000);
}

/* Generated data reduced with braid's semantics must match the expected values exactly. */
static void test_generators(void)
{
    static const int ns[] = {1, 2, 3, 4, 8, 16};
    enum { COUNT = 2000 };
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        size_t ts = perf_dtype_size(dt);
        char *in[16], *got = malloc(COUNT * ts), *exp = malloc(COUNT * ts);
        for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
            int n = ns[k];
            for (int op = 0; op < PERF_NUM_OPS; op++) {
                perf_gen_t g;
                perf_gen_init(&g, dt, op, n, 7 + (uint64_t)op);
                for (int r = 0; r < n; r++) {
                    in[r] = malloc(COUNT * ts);
                    perf_fill(&g, in[r], COUNT, 1000, r);
                }
                for (size_t i = 0; i < COUNT; i++)
                    ref_reduce(dt, op, n, (const void *const *)in, i, got, i);
                perf_fill_expected(&g, exp, COUNT, 1000);
                size_t wrong = perf_check(&g, got, exp, COUNT);
                if (wrong) {
                    fprintf(stderr, "generator %s %s n=%d: %zu wrong\n", perf_dtype_name(dt),
                            perf_op_name(op), n, wrong);
                    failures++;
                }
                got[5 * ts] ^= 0x20; /* one corrupted element is caught */
                if (perf_check(&g, got, exp, COUNT) != 1) {
                    fprintf(stderr, "generator %s %s n=%d: a corrupted element is not caught\n",
                            perf_dtype_name(dt), perf_op_name(op), n);
                    failures++;
                }
                size_t distinct = 0; /* inputs are not constant */
                for (size_t i = 1; i < COUNT; i++)
                    distinct += memcmp(in[0] + i * ts, in[0], ts) != 0;
                EXPECT(distinct > COUNT / 3);
                for (int r = 0; r < n; r++)
                    free(in[r]);
            }
        }
        free(got);
        free(exp);
    }
}

static void test_bench(void)
{
    perf_opts_t o;
    char *argv[] = {"x", "-b", "8", "-e", "8K",  "-f", "8",   "-n",
                    "2", "-w", "1", "-d", "all", "-o", "all", NULL};
    EXPECT(perf_parse_args(15, argv, &perf_coll_allreduce, &o) == 0);
    fflush(stdout);
    int saved = dup(1);
    if (!freopen("/dev/null", "w", stdout)) return;
    for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++) {
        for (int n = 1; n <= 4; n++) {
            o.root = n - 1;
            int rc = fake_run(n, 0, colls[c], &o);
            if (rc != 0) {
                fprintf(stderr, "fake %s on %d ranks: exit %d\n", colls[c]->name, n, rc);
                failures++;
            }
            if (n > 1 && fake_run(n, 1, colls[c], &o) != 1) {
                fprintf(stderr, "fake %s on %d ranks: corruption not detected\n", colls[c]->name,
                        n);
                failures++;
            }
        }
        o.average = (int)c % 4; /* every -a mode on some collective */
    }
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
}

int main(int argc, char **argv)
{
    setlinebuf(stdout);
    if (argc >= 4 && strcmp(argv[1], "run") == 0) {
        int n = atoi(argv[2]);
        const perf_coll_t *coll = coll_by_name(argv[3]);
        if (n < 1 || n > FAKE_MAX_RANKS || !coll) {
            fprintf(stderr, "usage: %s run NRANKS COLL [flags]\n", argv[0]);
            return 2;
        }
        perf_opts_t o;
        int prc = perf_parse_args(argc - 3, argv + 3, coll, &o);
        if (prc) return prc > 0 ? 0 : 2;
        const char *bug = getenv("FAKE_BUG");
        return fake_run(n, bug && atoi(bug), coll, &o);
    }
    test_conversions();
    test_parsing();
    test_geometry();
    test_generators();
    test_bench();
    printf("perf_selftest: %s (%d failures)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
