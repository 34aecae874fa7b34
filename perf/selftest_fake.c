/* perf_selftest's reference arithmetic and fake backend (see selftest.h). */
#include "selftest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
void ref_reduce(int dt, int op, int n, const void *const *src, size_t off, void *dst, size_t di)
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
    if (me == 0 && w->nsums < 64) { /* FNV-1a of the input rank 0 sends */
        uint64_t h = 14695981039346656037ull;
        int blocks = coll->kind == PERF_REDUCE_SCATTER || coll->kind == PERF_ALLTOALL ? n : 1;
        size_t len = (size_t)blocks * count * ts;
        for (size_t i = 0; i < len; i++)
            h = (h ^ ((const uint8_t *)send)[i]) * 1099511628211ull;
        w->sums[w->nsums++] = h;
    }
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

/* --device on the fake: "device" buffers are host memory that starts as 0x77 bytes, so a
 * block the harness forgets to copy in shows as wrong data. */
static int fdev_setup(perf_backend_t *b, int mode)
{
    (void)b, (void)mode;
    return 0;
}

static void *fdev_alloc(perf_backend_t *b, size_t n)
{
    (void)b;
    void *p = malloc(n ? n : 16);
    if (p) memset(p, 0x77, n);
    return p;
}

static void fdev_free(perf_backend_t *b, void *p)
{
    (void)b;
    free(p);
}

static int fdev_copy(perf_backend_t *b, void *dst, const void *src, size_t n)
{
    (void)b;
    memcpy(dst, src, n);
    return 0;
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
    if (fr->w->device) {
        b.dev_setup = fdev_setup;
        b.dev_alloc = fdev_alloc;
        b.dev_free = fdev_free;
        b.dev_copy = fdev_copy;
    }
    fr->rc = perf_bench_run(&b, fr->coll, fr->opts);
    free(ctx.tmp);
    return NULL;
}

/* Runs the bench loop on n thread-ranks; returns the worst exit code. */
int fake_run_in(fake_world_t *wp, int n, int bug, const perf_coll_t *coll, const perf_opts_t *opts)
{
    fake_world_t w = {.n = n, .bug = bug, .device = opts->device != 0};
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
    if (wp) *wp = w;
    return rc;
}

int fake_run(int n, int bug, const perf_coll_t *coll, const perf_opts_t *opts)
{
    return fake_run_in(NULL, n, bug, coll, opts);
}

const perf_coll_t *const fake_colls[FAKE_NCOLLS] = {
    &perf_coll_allreduce, &perf_coll_broadcast, &perf_coll_reduce, &perf_coll_reduce_scatter,
    &perf_coll_allgather, &perf_coll_alltoall,  &perf_coll_gather, &perf_coll_scatter,
    &perf_coll_sendrecv,  &perf_coll_hypercube};

const perf_coll_t *coll_by_name(const char *s)
{
    for (size_t i = 0; i < FAKE_NCOLLS; i++)
        if (strcmp(fake_colls[i]->name, s) == 0) return fake_colls[i];
    return NULL;
}
