/* PowerSGD communication hook (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank
 * Gradient Compression for Distributed Optimization", 2019; the same steps as PyTorch's
 * powerSGD_hook). Per float32 bucket, for each parameter registered as a rows x cols matrix
 * that is worth compressing (rows * cols >= min_compression_rate * (rows + cols) * r):
 *
 *   launch:   M = grad + error;  P = M Q  (Q: cols x r, kept from the last step: warm start)
 *             start all-reduce (sum) [P of every compressed matrix | the other gradients, raw]
 *   next:     other gradients = their sum (/ n for BRAID_AVG)
 *             P = Gram-Schmidt(P)  (orthonormal columns; the sum needs no division)
 *             Q = M^T P;  start all-reduce (sum) [Q of every compressed matrix]
 *   complete: Q /= n for BRAID_AVG;  approx = P Q^T;  error = M - approx (error feedback);
 *             grad = approx
 *
 * The layer runs next() at fixed points of the step (just before it launches the next bucket,
 * or in finish: ddp.h), so every rank issues the P and Q all-reduces in the same order, and the
 * Q all-reduce overlaps the rest of backward; complete() as soon as Q's is seen done. The initial Q
 * is pseudo-random and the same on every rank (see ddp.h for the formula). Other buckets, and every
 * bucket in the first start_iter steps, are all-reduced uncompressed with the layer's op. Matrix
 * products in plain loops over M's rows (row-major), accumulating in float; dot products of
 * Gram-Schmidt in double. */
#include "ddp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int index; /* parameter index */
    size_t off, count, rows, cols, r;
    int compress;
    size_t poff, qoff; /* P's offset in the wire buffer, Q's in the Q buffer (floats) */
    float *q;          /* Q transposed: r x cols (row j = column j of Q) */
    float *err;        /* rows x cols (error feedback) */
} psgd_param_t;

typedef struct {
    int built, plain; /* plain: this step's reduction was an uncompressed all-reduce */
    int np;
    psgd_param_t *p;
    size_t nwire, nq; /* floats: P's + raw gradients; Q's */
    float *wire, *qbuf;
} psgd_bucket_t;

typedef struct {
    braid_ddp_powersgd_options_t o;
    int nbuckets;
    psgd_bucket_t *b;
    unsigned long long iter, sent, dense;
} psgd_state_t;

void braid_ddp_powersgd_options_init(braid_ddp_powersgd_options_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof(*o));
    o->rank = 2;
    o->min_compression_rate = 2.0;
    o->error_feedback = 1;
    o->warm_start = 1;
}

double braid_ddp_powersgd_q0(uint64_t seed, int param, size_t k, size_t j, size_t r)
{
    uint64_t z = seed + ((uint64_t)param << 40) + (uint64_t)(k * r + j) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 2.0 * (double)(z >> 11) * 0x1p-53 - 1.0;
}

static void fill_q(const psgd_state_t *s, psgd_param_t *p)
{
    uint64_t seed = s->o.seed;
    if (!s->o.warm_start) seed += s->iter * 0xD1B54A32D192ED03ull;
    for (size_t k = 0; k < p->cols; k++)
        for (size_t j = 0; j < p->r; j++)
            p->q[j * p->cols + k] = (float)braid_ddp_powersgd_q0(seed, p->index, k, j, p->r);
}

static braid_result_t nomem(void)
{
    return ddp_set_error(BRAID_ERR_NOMEM, "powersgd hook: out of memory");
}

static braid_result_t build(psgd_state_t *s, const braid_ddp_bucket_t *b)
{
    if (b->index >= s->nbuckets) {
        psgd_bucket_t *nb = realloc(s->b, (size_t)(b->index + 1) * sizeof(*nb));
        if (!nb) return nomem();
        memset(nb + s->nbuckets, 0, (size_t)(b->index + 1 - s->nbuckets) * sizeof(*nb));
        s->b = nb;
        s->nbuckets = b->index + 1;
    }
    psgd_bucket_t *bk = &s->b[b->index];
    if (bk->built) return BRAID_SUCCESS;
    bk->p = calloc((size_t)b->nparams, sizeof(*bk->p));
    if (!bk->p) return nomem();
    bk->np = b->nparams;
    size_t off = 0, np = 0, nq = 0, nraw = 0;
    for (int k = 0; k < b->nparams; k++) {
        const braid_ddp_param_t *d = &b->param_defs[b->params[k]];
        psgd_param_t *p = &bk->p[k];
        p->index = b->params[k];
        p->off = off;
        p->count = d->count;
        off += d->count;
        p->rows = d->rows > 1 ? d->rows : 1;
        p->cols = d->count / p->rows;
        p->r = (size_t)s->o.rank;
        if (p->r > p->rows) p->r = p->rows;
        if (p->r > p->cols) p->r = p->cols;
        p->compress = p->rows > 1 && p->cols > 1 &&
                      (double)p->rows * (double)p->cols >=
                          s->o.min_compression_rate * (double)(p->rows + p->cols) * (double)p->r;
        if (!p->compress) {
            nraw += p->count;
            continue;
        }
        p->poff = np;
        p->qoff = nq;
        np += p->rows * p->r;
        nq += p->cols * p->r;
        p->q = malloc(p->cols * p->r * sizeof(float));
        p->err = calloc(p->count, sizeof(float));
        if (!p->q || !p->err) return nomem();
        fill_q(s, p);
    }
    /* raw gradients after the P's */
    size_t at = np;
    for (int k = 0; k < bk->np; k++)
        if (!bk->p[k].compress) {
            bk->p[k].poff = at;
            at += bk->p[k].count;
        }
    bk->nwire = np + nraw;
    bk->nq = nq;
    bk->wire = malloc((bk->nwire ? bk->nwire : 1) * sizeof(float));
    bk->qbuf = malloc((nq ? nq : 1) * sizeof(float));
    if (!bk->wire || !bk->qbuf) return nomem();
    bk->built = 1;
    return BRAID_SUCCESS;
}

static int nranks(const braid_ddp_bucket_t *b)
{
    int n = 1;
    if (braid_comm_size(b->comm, &n) || n < 1) n = 1;
    return n;
}

static unsigned long long ring(int n, size_t bytes)
{
    return 2ull * (unsigned long long)bytes * (unsigned long long)(n - 1) / (unsigned long long)n;
}

/* In 8 partial sums (vectorizable without reassociation flags). */
static float dot(const float *a, const float *b, size_t n)
{
    float acc[8] = {0};
    size_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += a[c + u] * b[c + u];
    float t = 0;
    for (; c < n; c++)
        t += a[c] * b[c];
    for (int u = 0; u < 8; u++)
        t += acc[u];
    return t;
}

static void axpy(float *y, float a, const float *x, size_t n)
{
    for (size_t c = 0; c < n; c++)
        y[c] += a * x[c];
}

static braid_result_t psgd_launch(void *state, const braid_ddp_bucket_t *b, braid_request_t *req_p)
{
    psgd_state_t *s = state;
    int n = nranks(b);
    if (b->index == 0) s->iter++;
    s->dense += ring(n, b->count * braid_dtype_size(b->dtype));
    braid_result_t r = build(s, b);
    if (r) return r;
    psgd_bucket_t *bk = &s->b[b->index];
    bk->plain = b->dtype != BRAID_FLOAT32 || s->iter <= (unsigned long long)s->o.start_iter;
    if (bk->plain) {
        s->sent += ring(n, b->count * braid_dtype_size(b->dtype));
        return braid_iallreduce(b->data, b->data, b->count, b->dtype, b->op, b->comm, req_p);
    }
    float *data = b->data;
    for (int k = 0; k < bk->np; k++) {
        psgd_param_t *p = &bk->p[k];
        float *m = data + p->off, *w = bk->wire + p->poff;
        if (!p->compress) {
            memcpy(w, m, p->count * sizeof(float));
            continue;
        }
        if (!s->o.warm_start) fill_q(s, p);
        if (s->o.error_feedback)
            for (size_t e = 0; e < p->count; e++)
                m[e] += p->err[e];
        /* P = M Q: P[i][j] = M's row i . Q's column j (contiguous in q) */
        for (size_t i = 0; i < p->rows; i++)
            for (size_t j = 0; j < p->r; j++)
                w[i * p->r + j] = dot(m + i * p->cols, p->q + j * p->cols, p->cols);
    }
    s->sent += ring(n, bk->nwire * sizeof(float));
    return braid_iallreduce(bk->wire, bk->wire, bk->nwire, BRAID_FLOAT32, BRAID_SUM, b->comm,
                            req_p);
}

static void orthogonalize(float *P, size_t rows, size_t r)
{
    for (size_t i = 0; i < r; i++) {
        double nn = 0;
        for (size_t k = 0; k < rows; k++)
            nn += (double)P[k * r + i] * (double)P[k * r + i];
        if (nn > 0) {
            /* in double: |P[k]| / |P| <= 1, where 1 / |P| alone can be beyond float's range
             * (|P| < 2^-128: tiny gradients) */
            double inv = 1.0 / sqrt(nn);
            for (size_t k = 0; k < rows; k++)
                P[k * r + i] = (float)((double)P[k * r + i] * inv);
        }
        for (size_t j = i + 1; j < r; j++) {
            double dot = 0;
            for (size_t k = 0; k < rows; k++)
                dot += (double)P[k * r + i] * (double)P[k * r + j];
            float fd = (float)dot;
            for (size_t k = 0; k < rows; k++)
                P[k * r + j] -= fd * P[k * r + i];
        }
    }
}

/* Second stage (at the layer's fixed point after P's all-reduce): the raw gradients' sums
 * scaled, P orthonormalised, Q = M^T P, and Q's all-reduce started. */
static braid_result_t psgd_next(void *state, const braid_ddp_bucket_t *b, braid_request_t *req_p)
{
    psgd_state_t *s = state;
    psgd_bucket_t *bk = &s->b[b->index];
    *req_p = NULL;
    if (bk->plain) return BRAID_SUCCESS;
    int n = nranks(b);
    const float scale = b->op == BRAID_AVG ? 1.0f / (float)n : 1.0f;
    float *data = b->data;
    for (int k = 0; k < bk->np; k++) {
        psgd_param_t *p = &bk->p[k];
        if (p->compress) continue;
        const float *w = bk->wire + p->poff;
        for (size_t e = 0; e < p->count; e++)
            data[p->off + e] = w[e] * scale;
    }
    if (!bk->nq) return BRAID_SUCCESS;
    /* Q = M^T P with the orthonormalized, summed P */
    for (int k = 0; k < bk->np; k++) {
        psgd_param_t *p = &bk->p[k];
        if (!p->compress) continue;
        float *P = bk->wire + p->poff, *Q = bk->qbuf + p->qoff;
        const float *m = data + p->off;
        orthogonalize(P, p->rows, p->r);
        /* Q transposed: row j = sum over i of P[i][j] * M's row i */
        memset(Q, 0, p->cols * p->r * sizeof(float));
        for (size_t i = 0; i < p->rows; i++)
            for (size_t j = 0; j < p->r; j++)
                axpy(Q + j * p->cols, P[i * p->r + j], m + i * p->cols, p->cols);
    }
    s->sent += ring(n, bk->nq * sizeof(float));
    return braid_iallreduce(bk->qbuf, bk->qbuf, bk->nq, BRAID_FLOAT32, BRAID_SUM, b->comm, req_p);
}

/* Warm start: Q (this step's, the same on every rank) for the next step. A column of Q that is
 * zero or nearly (|column| < 2^-64; e.g. M was zero on every rank: a parameter unused this
 * step) starts over from the initial formula instead: kept, it would make the next P = M Q
 * zero, and so every later Q, and the gradient would be approximated as zero for good (all of
 * it left in the error buffer). */
static void keep_q(const psgd_state_t *s, psgd_param_t *p, const float *Q)
{
    for (size_t j = 0; j < p->r; j++) {
        const float *qj = Q + j * p->cols;
        double nn = 0;
        for (size_t k = 0; k < p->cols; k++)
            nn += (double)qj[k] * (double)qj[k];
        if (nn >= 0x1p-128) {
            memcpy(p->q + j * p->cols, qj, p->cols * sizeof(float));
            continue;
        }
        for (size_t k = 0; k < p->cols; k++)
            p->q[j * p->cols + k] = (float)braid_ddp_powersgd_q0(s->o.seed, p->index, k, j, p->r);
    }
}

/* After Q's all-reduce: approx = P Q^T into the gradients, the error feedback, warm start. */
static braid_result_t psgd_complete(void *state, const braid_ddp_bucket_t *b)
{
    psgd_state_t *s = state;
    psgd_bucket_t *bk = &s->b[b->index];
    if (bk->plain || !bk->nq) return BRAID_SUCCESS;
    int n = nranks(b);
    const float scale = b->op == BRAID_AVG ? 1.0f / (float)n : 1.0f;
    float *data = b->data;
    for (int k = 0; k < bk->np; k++) {
        psgd_param_t *p = &bk->p[k];
        if (!p->compress) continue;
        const float *P = bk->wire + p->poff;
        float *Q = bk->qbuf + p->qoff, *m = data + p->off;
        for (size_t e = 0; e < p->cols * p->r; e++)
            Q[e] *= scale;
        /* approx row i = sum over j of P[i][j] * Q's column j; error = M - approx */
        for (size_t i = 0; i < p->rows; i++) {
            float *mi = m + i * p->cols, *ei = p->err + i * p->cols;
            if (s->o.error_feedback) memcpy(ei, mi, p->cols * sizeof(float));
            memset(mi, 0, p->cols * sizeof(float));
            for (size_t j = 0; j < p->r; j++)
                axpy(mi, P[i * p->r + j], Q + j * p->cols, p->cols);
            if (s->o.error_feedback)
                for (size_t c = 0; c < p->cols; c++)
                    ei[c] -= mi[c];
        }
        if (s->o.warm_start) keep_q(s, p, Q);
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_ddp_hook_powersgd(braid_ddp_hook_t *hook_p,
                                       const braid_ddp_powersgd_options_t *opts)
{
    if (!hook_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "hook_p is NULL");
    braid_ddp_powersgd_options_t o;
    if (opts)
        o = *opts;
    else
        braid_ddp_powersgd_options_init(&o);
    if (o.rank < 1)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "powersgd: rank %d (must be >= 1)", o.rank);
    if (!(o.min_compression_rate > 0))
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "powersgd: min_compression_rate %g (must be > 0)",
                             o.min_compression_rate);
    if (o.start_iter < 0)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "powersgd: start_iter %d (must be >= 0)",
                             o.start_iter);
    psgd_state_t *s = calloc(1, sizeof(*s));
    if (!s) return nomem();
    s->o = o;
    hook_p->launch = psgd_launch;
    hook_p->complete = psgd_complete;
    hook_p->next = psgd_next;
    hook_p->state = s;
    return BRAID_SUCCESS;
}

static psgd_state_t *state_of(const braid_ddp_hook_t *hook)
{
    return hook && hook->launch == psgd_launch ? hook->state : NULL;
}

void braid_ddp_hook_powersgd_free(braid_ddp_hook_t *hook)
{
    psgd_state_t *s = state_of(hook);
    if (!s) return;
    for (int b = 0; b < s->nbuckets; b++) {
        for (int k = 0; k < s->b[b].np; k++) {
            free(s->b[b].p[k].q);
            free(s->b[b].p[k].err);
        }
        free(s->b[b].p);
        free(s->b[b].wire);
        free(s->b[b].qbuf);
    }
    free(s->b);
    free(s);
    hook->state = NULL;
}

braid_result_t braid_ddp_powersgd_stats(const braid_ddp_hook_t *hook,
                                        braid_ddp_powersgd_stats_t *st)
{
    psgd_state_t *s = state_of(hook);
    if (!s) return ddp_set_error(BRAID_ERR_INVALID_ARG, "hook is not a PowerSGD hook");
    if (!st) return ddp_set_error(BRAID_ERR_INVALID_ARG, "stats_p is NULL");
    memset(st, 0, sizeof(*st));
    st->sent_bytes = s->sent;
    st->dense_bytes = s->dense;
    st->steps = s->iter;
    for (int b = 0; b < s->nbuckets; b++) {
        const psgd_bucket_t *bk = &s->b[b];
        st->state_bytes += (bk->nwire + bk->nq) * sizeof(float);
        for (int k = 0; k < bk->np; k++)
            if (bk->p[k].compress) {
                st->compressed_params++;
                st->state_bytes += (bk->p[k].count + bk->p[k].cols * bk->p[k].r) * sizeof(float);
            }
    }
    return BRAID_SUCCESS;
}

const float *braid_ddp_powersgd_error(const braid_ddp_hook_t *hook, int param)
{
    psgd_state_t *s = state_of(hook);
    if (!s) return NULL;
    for (int b = 0; b < s->nbuckets; b++)
        for (int k = 0; k < s->b[b].np; k++)
            if (s->b[b].p[k].index == param) return s->b[b].p[k].err;
    return NULL;
}
