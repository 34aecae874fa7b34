/* The MLP (784-512-512-10, ReLU, softmax cross-entropy) with its matrix products in OpenBLAS
 * (cblas_sgemm; one thread per rank, set in main.c), and the optimizers (SGD with momentum,
 * Adam). Weights are out x in, row-major; activations are batch x features.
 *
 * Parameter registration order: W1 as w1_blocks row blocks, b1, W2 as w2_blocks row blocks,
 * b2, W3, b3. Backward produces gradients in the reverse order: b3 W3 | b2 W2[last block] ...
 * W2[0] | b1 W1[last block] ... W1[0], and marks each ready as soon as it is final, so the DDP
 * layer's buckets (reverse registration order) fill in the order backward completes them. W1
 * holds 60% of the parameters; computing
 * its gradient block by block lets the first blocks' all-reduce overlap the later blocks. */
#include "ddp_mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float *falloc(size_t n)
{
    float *p = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
    if (p) memset(p, 0, n * sizeof(float));
    return p;
}

int mlp_init(mlp_t *m, const int *dims, const int *wblocks, int batch_cap, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    for (int l = 0; l <= MLP_LAYERS; l++)
        m->dims[l] = dims[l];
    int np = 0;
    for (int l = 0; l < MLP_LAYERS; l++) {
        int k = l < MLP_LAYERS - 1 ? wblocks[l] : 1;
        if (k < 1 || dims[l + 1] % k || np + k + 1 > MLP_MAX_PARAMS) {
            fprintf(stderr, "ddp_mlp: --w%d-blocks %d must divide %d (and all blocks <= %d)\n",
                    l + 1, k, dims[l + 1], MLP_MAX_PARAMS - 2 * MLP_LAYERS + 2);
            return -1;
        }
        m->wblocks[l] = k;
        m->iw[l] = np;
        m->ib[l] = np + k;
        np += k + 1;
    }
    m->nparams = np;
    m->batch_cap = batch_cap;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (int l = 0; l < MLP_LAYERS; l++) {
        int in = dims[l], out = dims[l + 1];
        m->W[l] = falloc((size_t)in * (size_t)out);
        m->b[l] = falloc((size_t)out);
        m->gW[l] = falloc((size_t)in * (size_t)out);
        m->gb[l] = falloc((size_t)out);
        m->z[l] = falloc((size_t)batch_cap * (size_t)out);
        m->a[l] = falloc((size_t)batch_cap * (size_t)out);
        if (!m->W[l] || !m->b[l] || !m->gW[l] || !m->gb[l] || !m->z[l] || !m->a[l]) return -1;
        /* as torch.nn.Linear: U(-1/sqrt(in), 1/sqrt(in)) */
        float bound = 1.0f / sqrtf((float)in);
        for (size_t i = 0; i < (size_t)in * (size_t)out; i++)
            m->W[l][i] = bound * (2.0f * (float)(rng_next(&s) >> 40) / 16777216.0f - 1.0f);
        for (int i = 0; i < out; i++)
            m->b[l][i] = bound * (2.0f * (float)(rng_next(&s) >> 40) / 16777216.0f - 1.0f);
    }
    int maxd = dims[1] > dims[2] ? dims[1] : dims[2];
    m->d1 = falloc((size_t)batch_cap * (size_t)maxd);
    m->d2 = falloc((size_t)batch_cap * (size_t)maxd);
    if (!m->d1 || !m->d2) return -1;
    for (int l = 0; l < MLP_LAYERS; l++) {
        int nb = m->wblocks[l], rows = dims[l + 1] / nb;
        size_t blk = (size_t)rows * (size_t)dims[l];
        for (int k = 0; k < nb; k++) {
            int iw = m->iw[l] + k;
            if (nb > 1)
                snprintf(m->names[iw], sizeof(m->names[iw]), "W%d.%d", l + 1, k);
            else
                snprintf(m->names[iw], sizeof(m->names[iw]), "W%d", l + 1);
            m->reg[iw] = (braid_ddp_param_t){m->W[l] + k * blk, m->gW[l] + k * blk, blk,
                                             BRAID_FLOAT32,     m->names[iw],       (size_t)rows};
        }
        int ib = m->ib[l];
        snprintf(m->names[ib], sizeof(m->names[ib]), "b%d", l + 1);
        m->reg[ib] = (braid_ddp_param_t){m->b[l],       m->gb[l],     (size_t)dims[l + 1],
                                         BRAID_FLOAT32, m->names[ib], 0};
    }
    for (int i = 0; i < m->nparams; i++) {
        m->m1[i] = falloc(m->reg[i].count);
        m->m2[i] = falloc(m->reg[i].count);
        if (!m->m1[i] || !m->m2[i]) return -1;
    }
    return 0;
}

void mlp_free(mlp_t *m)
{
    for (int l = 0; l < MLP_LAYERS; l++) {
        free(m->W[l]);
        free(m->b[l]);
        free(m->gW[l]);
        free(m->gb[l]);
        free(m->z[l]);
        free(m->a[l]);
    }
    free(m->d1);
    free(m->d2);
    for (int i = 0; i < m->nparams; i++) {
        free(m->m1[i]);
        free(m->m2[i]);
    }
}

void mlp_use_views(mlp_t *m, braid_ddp_t ddp)
{
    for (int i = 0; i < m->nparams; i++)
        m->reg[i].grad = braid_ddp_grad(ddp, i);
}

double mlp_forward(mlp_t *m, const float *x, const uint8_t *labels, int count)
{
    const float *in = x;
    for (int l = 0; l < MLP_LAYERS; l++) {
        int din = m->dims[l], dout = m->dims[l + 1];
        float *z = m->z[l];
        for (int r = 0; r < count; r++)
            memcpy(z + (size_t)r * (size_t)dout, m->b[l], (size_t)dout * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, count, dout, din, 1.0f, in, din,
                    m->W[l], din, 1.0f, z, dout);
        if (l < MLP_LAYERS - 1) {
            float *a = m->a[l];
            for (size_t i = 0; i < (size_t)count * (size_t)dout; i++)
                a[i] = z[i] > 0 ? z[i] : 0;
            in = a;
        }
    }
    if (!labels) return 0;
    int c = m->dims[MLP_LAYERS];
    const float *lg = m->z[MLP_LAYERS - 1];
    double loss = 0;
    for (int r = 0; r < count; r++) {
        const float *row = lg + (size_t)r * (size_t)c;
        float mx = row[0];
        for (int j = 1; j < c; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int j = 0; j < c; j++)
            sum += exp((double)(row[j] - mx));
        loss += log(sum) - (double)(row[labels[r]] - mx);
    }
    return loss;
}

static void ev_begin(mlp_events_t *ev, const char *name)
{
    if (!ev || ev->n >= MLP_MAX_EVENTS) return;
    snprintf(ev->name[ev->n], sizeof(ev->name[0]), "%s", name);
    ev->t0[ev->n] = now_s();
}
static void ev_end(mlp_events_t *ev)
{
    if (!ev || ev->n >= MLP_MAX_EVENTS) return;
    ev->t1[ev->n++] = now_s();
}

static void colsum(const float *d, int rows, int cols, float *out)
{
    memset(out, 0, (size_t)cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
            out[j] += d[(size_t)r * (size_t)cols + (size_t)j];
}

#define READY(i)                                                                                   \
    do {                                                                                           \
        if (ddp && overlap) {                                                                      \
            braid_result_t r_ = braid_ddp_grad_ready(ddp, (i));                                    \
            if (r_) return r_;                                                                     \
        }                                                                                          \
    } while (0)

/* Where gradient i goes this step (ZeRO-2: a staging slot, taken just before it is written). */
#define GRAD(i)                                                                                    \
    do {                                                                                           \
        if (ddp) {                                                                                 \
            braid_result_t r_ = braid_ddp_grad_buffer(ddp, (i), &m->reg[(i)].grad);                \
            if (r_) return r_;                                                                     \
        }                                                                                          \
    } while (0)

braid_result_t mlp_backward(mlp_t *m, const float *x, const uint8_t *labels, int count, double norm,
                            braid_ddp_t ddp, int overlap, mlp_events_t *ev)
{
    int c = m->dims[MLP_LAYERS];
    /* dL/dlogits = (softmax - onehot) / norm, into d2 */
    float *dz = m->d2, *dn = m->d1;
    const float *lg = m->z[MLP_LAYERS - 1];
    for (int r = 0; r < count; r++) {
        const float *row = lg + (size_t)r * (size_t)c;
        float *o = dz + (size_t)r * (size_t)c;
        float mx = row[0];
        for (int j = 1; j < c; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int j = 0; j < c; j++)
            sum += exp((double)(row[j] - mx));
        for (int j = 0; j < c; j++)
            o[j] =
                (float)((exp((double)(row[j] - mx)) / sum - (j == labels[r] ? 1.0 : 0.0)) / norm);
    }
    for (int l = MLP_LAYERS - 1; l >= 0; l--) {
        int din = m->dims[l], dout = m->dims[l + 1];
        const float *ain = l == 0 ? x : m->a[l - 1];
        int ib = m->ib[l];
        char nm[16];
        snprintf(nm, sizeof(nm), "b%d", l + 1);
        GRAD(ib);
        ev_begin(ev, nm);
        colsum(dz, count, dout, m->reg[ib].grad);
        ev_end(ev);
        READY(ib);
        int rows = dout / m->wblocks[l];
        for (int k = m->wblocks[l] - 1; k >= 0; k--) {
            int iw = m->iw[l] + k;
            GRAD(iw);
            ev_begin(ev, m->names[iw]);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, din, count, 1.0f,
                        dz + k * rows, dout, ain, din, 0.0f, m->reg[iw].grad, din);
            ev_end(ev);
            READY(iw);
        }
        if (l > 0) {
            /* dA(l-1) = dz W, masked by ReLU'(z(l-1)) */
            snprintf(nm, sizeof(nm), "dA%d", l);
            ev_begin(ev, nm);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, count, din, dout, 1.0f, dz, dout,
                        m->W[l], din, 0.0f, dn, din);
            const float *zp = m->z[l - 1];
            for (size_t i = 0; i < (size_t)count * (size_t)din; i++)
                if (zp[i] <= 0) dn[i] = 0;
            ev_end(ev);
            float *t = dz;
            dz = dn;
            dn = t;
        }
    }
    if (ddp && !overlap)
        for (int i = m->nparams - 1; i >= 0; i--) {
            braid_result_t r = braid_ddp_grad_ready(ddp, i);
            if (r) return r;
        }
    return BRAID_SUCCESS;
}

void mlp_update(const mlp_t *m, float *p, const float *g, float *m1, float *m2, size_t n)
{
    if (m->adam) {
        float bc1 = 1.0f - powf(m->beta1, (float)m->t), bc2 = 1.0f - powf(m->beta2, (float)m->t);
        for (size_t j = 0; j < n; j++) {
            m1[j] = m->beta1 * m1[j] + (1 - m->beta1) * g[j];
            m2[j] = m->beta2 * m2[j] + (1 - m->beta2) * g[j] * g[j];
            p[j] -= m->lr * (m1[j] / bc1) / (sqrtf(m2[j] / bc2) + m->eps);
        }
    } else {
        for (size_t j = 0; j < n; j++) {
            m1[j] = m->momentum * m1[j] + g[j];
            p[j] -= m->lr * m1[j];
        }
    }
}

void mlp_step(mlp_t *m)
{
    m->t++;
    for (int i = 0; i < m->nparams; i++)
        mlp_update(m, m->reg[i].param, m->reg[i].grad, m->m1[i], m->m2[i], m->reg[i].count);
}

long mlp_correct(mlp_t *m, const float *x, const uint8_t *labels, int count)
{
    long ok = 0;
    int c = m->dims[MLP_LAYERS];
    for (int at = 0; at < count; at += m->batch_cap) {
        int k = count - at < m->batch_cap ? count - at : m->batch_cap;
        mlp_forward(m, x + (size_t)at * (size_t)m->dims[0], NULL, k);
        const float *lg = m->z[MLP_LAYERS - 1];
        for (int r = 0; r < k; r++) {
            int best = 0;
            for (int j = 1; j < c; j++)
                if (lg[(size_t)r * (size_t)c + (size_t)j] >
                    lg[(size_t)r * (size_t)c + (size_t)best])
                    best = j;
            ok += best == labels[at + r];
        }
    }
    return ok;
}

uint64_t mlp_hash(const mlp_t *m)
{
    uint64_t h = 1469598103934665603ull;
    for (int l = 0; l < MLP_LAYERS; l++) {
        const unsigned char *p = (const unsigned char *)m->W[l];
        for (size_t i = 0; i < (size_t)m->dims[l] * (size_t)m->dims[l + 1] * sizeof(float); i++)
            h = (h ^ p[i]) * 1099511628211ull;
        p = (const unsigned char *)m->b[l];
        for (size_t i = 0; i < (size_t)m->dims[l + 1] * sizeof(float); i++)
            h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

/* Samples [lo, hi) of a data set the model classifies right. */
long mlp_correct_range(mlp_t *m, const dataset_t *test, int lo, int hi)
{
    int k = hi - lo > 0 ? hi - lo : 1;
    int *idx = malloc((size_t)k * sizeof(int));
    float *x = malloc((size_t)k * 784 * sizeof(float));
    if (!idx || !x) {
        fprintf(stderr, "ddp_mlp: out of memory\n");
        exit(1);
    }
    for (int i = lo; i < hi; i++)
        idx[i - lo] = i;
    dataset_rows(test, idx, hi - lo, x);
    long ok = mlp_correct(m, x, test->label + lo, hi - lo);
    free(idx);
    free(x);
    return ok;
}
