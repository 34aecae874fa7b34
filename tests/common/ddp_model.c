#include "ddp_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

void dm_init(dm_model_t *m, int nlayers, const int *dims, uint64_t seed)
{
    memset(m, 0, sizeof(*m));
    m->nlayers = nlayers;
    m->nparams = 2 * nlayers;
    for (int l = 0; l <= nlayers; l++)
        m->dims[l] = dims[l];
    uint64_t s = seed * 7919 + 17;
    for (int l = 0; l < nlayers; l++) {
        int in = dims[l], out = dims[l + 1];
        m->count[2 * l] = (size_t)in * (size_t)out;
        m->count[2 * l + 1] = (size_t)out;
        snprintf(m->names[2 * l], sizeof(m->names[0]), "W%d", l + 1);
        snprintf(m->names[2 * l + 1], sizeof(m->names[0]), "b%d", l + 1);
        for (int k = 0; k < 2; k++) {
            int i = 2 * l + k;
            m->p[i] = malloc(m->count[i] * sizeof(float));
            m->g[i] = calloc(m->count[i], sizeof(float));
            double scale = k == 0 ? sqrt(2.0 / in) : 0.1;
            for (size_t j = 0; j < m->count[i]; j++)
                m->p[i][j] = (float)((urand(&s) * 2 - 1) * scale);
        }
    }
}

void dm_free(dm_model_t *m)
{
    for (int i = 0; i < m->nparams; i++) {
        free(m->p[i]);
        free(m->g[i]);
    }
}

void dm_params(const dm_model_t *m, braid_ddp_param_t *out)
{
    for (int i = 0; i < m->nparams; i++)
        out[i] = (braid_ddp_param_t){.param = m->p[i],
                                     .grad = m->g[i],
                                     .count = m->count[i],
                                     .dtype = BRAID_FLOAT32,
                                     .name = m->names[i]};
}

void dm_sample(const dm_model_t *m, long s, float *x, int *label)
{
    int d = m->dims[0], c = m->dims[m->nlayers];
    int lab = (int)((s * 7 + s / 3) % c);
    for (int j = 0; j < d; j++)
        x[j] = (float)(0.6 * sin(0.37 * (double)s + 1.3 * j) + (j % c == lab ? 0.8 : 0.0));
    *label = lab;
}

double dm_backward(dm_model_t *m, long first, int count, double norm,
                   int (*ready)(void *arg, int index), void *arg, int *ready_err)
{
    int L = m->nlayers, maxd = 0;
    for (int l = 0; l <= L; l++)
        if (m->dims[l] > maxd) maxd = m->dims[l];
    /* activations a[l] for l = 0..L (a[L] = softmax), per sample */
    float *a = malloc((size_t)count * (size_t)(L + 1) * (size_t)maxd * sizeof(float));
    float *delta = malloc((size_t)count * (size_t)maxd * sizeof(float));
    float *nd = malloc((size_t)count * (size_t)maxd * sizeof(float));
    int *lab = malloc((size_t)count * sizeof(int));
#define A(s, l, j) a[(((size_t)(s) * (size_t)(L + 1) + (size_t)(l)) * (size_t)maxd) + (size_t)(j)]
    double loss = 0;
    for (int s = 0; s < count; s++) {
        dm_sample(m, first + s, &A(s, 0, 0), &lab[s]);
        for (int l = 0; l < L; l++) {
            int in = m->dims[l], out = m->dims[l + 1];
            const float *W = m->p[2 * l], *b = m->p[2 * l + 1];
            for (int o = 0; o < out; o++) {
                float z = b[o];
                for (int k = 0; k < in; k++)
                    z += W[(size_t)o * (size_t)in + (size_t)k] * A(s, l, k);
                A(s, l + 1, o) = (l < L - 1 && z < 0) ? 0 : z;
            }
        }
        int c = m->dims[L];
        float mx = A(s, L, 0);
        for (int o = 1; o < c; o++)
            if (A(s, L, o) > mx) mx = A(s, L, o);
        double sum = 0;
        for (int o = 0; o < c; o++)
            sum += exp((double)(A(s, L, o) - mx));
        loss += log(sum) - (double)(A(s, L, lab[s]) - mx);
        for (int o = 0; o < c; o++) {
            double pr = exp((double)(A(s, L, o) - mx)) / sum;
            delta[(size_t)s * (size_t)maxd + (size_t)o] =
                (float)((pr - (o == lab[s] ? 1.0 : 0.0)) / norm);
        }
    }
    for (int l = L - 1; l >= 0; l--) {
        int in = m->dims[l], out = m->dims[l + 1];
        float *gW = m->g[2 * l], *gb = m->g[2 * l + 1];
        for (int o = 0; o < out; o++) {
            float acc = 0;
            for (int s = 0; s < count; s++)
                acc += delta[(size_t)s * (size_t)maxd + (size_t)o];
            gb[o] += acc;
        }
        if (ready && !*ready_err) *ready_err = ready(arg, 2 * l + 1);
        for (int o = 0; o < out; o++)
            for (int k = 0; k < in; k++) {
                float acc = 0;
                for (int s = 0; s < count; s++)
                    acc += delta[(size_t)s * (size_t)maxd + (size_t)o] * A(s, l, k);
                gW[(size_t)o * (size_t)in + (size_t)k] += acc;
            }
        if (ready && !*ready_err) *ready_err = ready(arg, 2 * l);
        if (l == 0) break;
        const float *W = m->p[2 * l];
        for (int s = 0; s < count; s++)
            for (int k = 0; k < in; k++) {
                float acc = 0;
                for (int o = 0; o < out; o++)
                    acc += delta[(size_t)s * (size_t)maxd + (size_t)o] *
                           W[(size_t)o * (size_t)in + (size_t)k];
                nd[(size_t)s * (size_t)maxd + (size_t)k] = A(s, l, k) > 0 ? acc : 0;
            }
        float *t = delta;
        delta = nd;
        nd = t;
    }
#undef A
    free(a);
    free(delta);
    free(nd);
    free(lab);
    return loss;
}

void dm_sgd(dm_model_t *m, float lr)
{
    for (int i = 0; i < m->nparams; i++)
        for (size_t j = 0; j < m->count[i]; j++) {
            m->p[i][j] -= lr * m->g[i][j];
            m->g[i][j] = 0;
        }
}

uint64_t dm_hash(const dm_model_t *m)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < m->nparams; i++) {
        const unsigned char *c = (const unsigned char *)m->p[i];
        for (size_t j = 0; j < m->count[i] * sizeof(float); j++)
            h = (h ^ c[j]) * 1099511628211ull;
    }
    return h;
}

double dm_maxdiff(const dm_model_t *a, const dm_model_t *b)
{
    double mx = 0;
    for (int i = 0; i < a->nparams; i++)
        for (size_t j = 0; j < a->count[i]; j++) {
            double d = fabs((double)a->p[i][j] - (double)b->p[i][j]) / (1 + fabs(b->p[i][j]));
            if (d > mx) mx = d;
        }
    return mx;
}

void dm_copy_params(dm_model_t *dst, const dm_model_t *src)
{
    for (int i = 0; i < src->nparams; i++)
        memcpy(dst->p[i], src->p[i], src->count[i] * sizeof(float));
}

int dm_check_shard(const braid_ddp_shard_t *sh, const braid_ddp_bucket_info_t *in,
                   const size_t *counts, float *const *ref, float *const *mag, int n)
{
    const float *g = sh->grad;
    for (size_t e = 0; e < sh->count; e++) {
        size_t at = sh->offset + e, off = 0;
        int k = 0; /* the parameter holding bucket element at */
        while (k < in->nparams && off + counts[in->params[k]] <= at)
            off += counts[in->params[k++]];
        float want = ref[in->params[k]][at - off];
        float bound = 2.0f * (float)n * 0x1p-24f * mag[in->params[k]][at - off];
        if (!(fabsf(g[e] - want) <= bound)) {
            fprintf(stderr, "shard elem %zu: %.9g vs DDP %.9g (bound %.3g)\n", at, g[e], want,
                    bound);
            return 1;
        }
    }
    return 0;
}

int dm_check_shard_layout(const braid_ddp_shard_t *sh, const braid_ddp_bucket_info_t *in, int rank,
                          int n)
{
    size_t per = (in->count + (size_t)n - 1) / (size_t)n, lo = (size_t)rank * per;
    size_t want = in->count > lo ? in->count - lo : 0;
    if (want > per) want = per;
    if (sh->offset == lo && sh->count == want) return 0;
    fprintf(stderr, "bucket of %zu: shard at %zu of %zu elements, expected %zu of %zu\n", in->count,
            sh->offset, sh->count, lo, want);
    return 1;
}

void dm_adam(float *p, const float *g, float *m, float *v, size_t n, int t, float lr)
{
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

braid_result_t dm_grad_magnitudes(const dm_model_t *m, float *const *mag, braid_comm_t comm)
{
    for (int i = 0; i < m->nparams; i++) {
        for (size_t e = 0; e < m->count[i]; e++)
            mag[i][e] = fabsf(m->g[i][e]);
        braid_result_t r =
            braid_allreduce(mag[i], mag[i], m->count[i], BRAID_FLOAT32, BRAID_SUM, comm);
        if (r) return r;
    }
    return BRAID_SUCCESS;
}

int dm_first_differing_rank(const dm_model_t *m, braid_comm_t comm)
{
    int n = 0;
    uint64_t h = dm_hash(m), all[64];
    if (braid_comm_size(comm, &n) || n > 64 || braid_allgather(&h, all, 1, BRAID_UINT64, comm))
        return -2;
    for (int q = 0; q < n; q++)
        if (all[q] != all[0]) return q;
    return -1;
}

double dm_maxabsdiff(const dm_model_t *a, const dm_model_t *b)
{
    double d = 0;
    for (int i = 0; i < a->nparams; i++)
        for (size_t e = 0; e < a->count[i]; e++)
            d = fmax(d, fabs((double)a->p[i][e] - (double)b->p[i][e]));
    return d;
}
