/* A small float32 MLP (ReLU hidden layers, softmax cross-entropy) for the DDP suites, in plain
 * loops: the reference the layer is checked against is the same model trained on one rank
 * with the whole batch. Parameters are registered as W1, b1, W2, b2, ... (weights out x in,
 * row-major). Samples come from the global sample index only, so every rank can build any
 * shard and the full batch. */
#ifndef BRAID_TEST_DDP_MODEL_H
#define BRAID_TEST_DDP_MODEL_H

#include "braid/ddp.h"

#include <stddef.h>
#include <stdint.h>

#define DM_MAX_LAYERS 4

typedef struct {
    int nlayers;
    int dims[DM_MAX_LAYERS + 1]; /* dims[0] inputs ... dims[nlayers] classes */
    int nparams;                 /* 2 * nlayers */
    float *p[2 * DM_MAX_LAYERS]; /* parameters */
    float *g[2 * DM_MAX_LAYERS]; /* gradients (may be redirected to bucket views) */
    size_t count[2 * DM_MAX_LAYERS];
    char names[2 * DM_MAX_LAYERS][16];
} dm_model_t;

/* dims has nlayers + 1 entries. Parameters drawn from seed (deterministic), gradients zero. */
void dm_init(dm_model_t *m, int nlayers, const int *dims, uint64_t seed);
void dm_free(dm_model_t *m);
/* The registration list for braid_ddp_create (names "W1", "b1", ...). */
void dm_params(const dm_model_t *m, braid_ddp_param_t *out);
/* Sample s of the synthetic data set: x (dims[0] values) and its label. */
void dm_sample(const dm_model_t *m, long s, float *x, int *label);
/* Forward + backward over samples [first, first + m): ADDS (1/norm) * the gradient of the
 * summed cross-entropy into g. After each parameter's gradient is final, calls
 * ready(arg, index) if ready is not NULL (order: last layer's b, W, then the layer before...).
 * Returns the summed loss. */
double dm_backward(dm_model_t *m, long first, int count, double norm,
                   int (*ready)(void *arg, int index), void *arg, int *ready_err);
/* p -= lr * g for every parameter; g zeroed. */
void dm_sgd(dm_model_t *m, float lr);
/* FNV-1a of every parameter's bytes. */
uint64_t dm_hash(const dm_model_t *m);
/* max over parameters of |a - b| / (1 + |b|). */
double dm_maxdiff(const dm_model_t *a, const dm_model_t *b);
void dm_copy_params(dm_model_t *dst, const dm_model_t *src);
/* ZeRO: the reduced gradients of shard sh of a bucket (in: its parameters) against the
 * reference gradients ref[param][elem] (counts: elements per parameter), each within
 * 2 n 2^-24 of mag[param][elem] (the summed magnitudes: n float additions round). Returns 0,
 * or prints the first element out of bound and returns 1. */
int dm_check_shard(const braid_ddp_shard_t *sh, const braid_ddp_bucket_info_t *in,
                   const size_t *counts, float *const *ref, float *const *mag, int n);
/* ZeRO: shard sh of bucket in (rank of n) is the rank-th of n equal parts of ceil(count / n)
 * elements, clipped to the bucket. 0, or prints the difference and returns 1. */
int dm_check_shard_layout(const braid_ddp_shard_t *sh, const braid_ddp_bucket_info_t *in, int rank,
                          int n);
/* Adam (beta1 0.9, beta2 0.999, eps 1e-8) at step t >= 1 over n elements, moments m and v. */
void dm_adam(float *p, const float *g, float *m, float *v, size_t n, int t, float lr);
/* mag[i][e] = sum over the ranks of |m->g[i][e]| (all-reduced on comm). */
braid_result_t dm_grad_magnitudes(const dm_model_t *m, float *const *mag, braid_comm_t comm);
/* Collective: -1 if every rank's parameters hash alike, else the first rank that differs from
 * rank 0 (-2 if the all-gather failed). At most 64 ranks. */
int dm_first_differing_rank(const dm_model_t *m, braid_comm_t comm);
/* max over parameters of |a - b|. */
double dm_maxabsdiff(const dm_model_t *a, const dm_model_t *b);

#endif
