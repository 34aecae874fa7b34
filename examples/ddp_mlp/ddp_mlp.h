/* ddp_mlp: a data-parallel MLP trainer on Fashion-MNIST over braid's DDP layer (see main.c). */
#ifndef DDP_MLP_H
#define DDP_MLP_H

#include "braid/ddp.h"

#include <stddef.h>
#include <stdint.h>

/* ---- data (data.c) ---- */
typedef struct {
    int n;          /* images */
    int dim;        /* 784 */
    uint8_t *pix;   /* n x dim pixels */
    uint8_t *label; /* n */
} dataset_t;

/* Reads <dir>/<prefix>-images-idx3-ubyte.gz and -labels-idx1-ubyte.gz (gzipped IDX), keeping
 * the first `limit` images (0 = all). Returns 0, or -1 after printing why. */
int dataset_load(dataset_t *d, const char *dir, const char *prefix, int limit);
/* The rows idx[0..k) as normalised floats (k x 784) into out. */
void dataset_rows(const dataset_t *d, const int *idx, int k, float *out);
void dataset_free(dataset_t *d);

/* ---- model (mlp.c) ---- */
#define MLP_LAYERS 3
#define MLP_MAX_PARAMS 40

typedef struct {
    int dims[MLP_LAYERS + 1];           /* 784 512 512 10 */
    int wblocks[MLP_LAYERS];            /* W(l+1) registered as this many row blocks (backward fills
                                           them in turn): --w1-blocks, --w2-blocks; W3 one */
    int iw[MLP_LAYERS], ib[MLP_LAYERS]; /* registration index of W(l+1)'s first block, b(l+1) */
    int nparams;
    float *W[MLP_LAYERS], *b[MLP_LAYERS];   /* parameters */
    float *gW[MLP_LAYERS], *gb[MLP_LAYERS]; /* gradients (or bucket views) */
    braid_ddp_param_t reg[MLP_MAX_PARAMS];  /* the registration list */
    char names[MLP_MAX_PARAMS][16];
    int batch_cap; /* activation buffers' rows */
    float *z[MLP_LAYERS], *a[MLP_LAYERS], *d1, *d2;
    /* optimizer */
    int adam;
    float lr, momentum, beta1, beta2, eps;
    long t;
    float *m1[MLP_MAX_PARAMS], *m2[MLP_MAX_PARAMS];
} mlp_t;

/* Timing of one backward pass (CLOCK_MONOTONIC seconds). */
#define MLP_MAX_EVENTS 64
typedef struct {
    int n;
    char name[MLP_MAX_EVENTS][16];
    double t0[MLP_MAX_EVENTS], t1[MLP_MAX_EVENTS];
} mlp_events_t;

/* wblocks[l]: row blocks of W(l+1) (each must divide dims[l + 1]). */
int mlp_init(mlp_t *m, const int *dims, const int *wblocks, int batch_cap, uint64_t seed);
void mlp_free(mlp_t *m);
/* Points the gradients at the layer's bucket views (grad_as_bucket_view). */
void mlp_use_views(mlp_t *m, braid_ddp_t ddp);
/* Forward over rows x (count x dims[0]); returns the summed cross-entropy; with labels NULL
 * only the logits are computed (in m->z[L-1]). */
double mlp_forward(mlp_t *m, const float *x, const uint8_t *labels, int count);
/* Backward of (1/norm) * summed loss of the last forward: writes the gradients; calls
 * braid_ddp_grad_ready for each parameter as it is final unless ready == NULL (and ddp is not
 * NULL), then (if defer) for all of them at the end. Returns the first error. */
braid_result_t mlp_backward(mlp_t *m, const float *x, const uint8_t *labels, int count, double norm,
                            braid_ddp_t ddp, int overlap, mlp_events_t *ev);
/* One optimizer update of n elements (m->t already advanced); m1/m2 its state (m2 unused by
 * SGD). */
void mlp_update(const mlp_t *m, float *p, const float *g, float *m1, float *m2, size_t n);
/* m->t++, then every registered parameter updated (plain DDP). */
void mlp_step(mlp_t *m);
/* Correct predictions over rows [0, count). */
long mlp_correct(mlp_t *m, const float *x, const uint8_t *labels, int count);
/* Samples [lo, hi) of d that the model classifies right. */
long mlp_correct_range(mlp_t *m, const dataset_t *d, int lo, int hi);
uint64_t mlp_hash(const mlp_t *m);

double now_s(void);

/* ---- local SGD and asynchronous DP switches (variants.c) ---- */
typedef struct {
    int local_sgd, local_state;    /* --local-sgd K (0: off), --local-sgd-state */
    int async, servers, staleness; /* --async, --servers S (1), --staleness B (16) */
    int slow_rank;                 /* --slow-rank R (-1: none) */
    double slow_factor;            /* --slow-factor F: rank R sleeps (F-1) x its compute time */
} variant_args_t;

/* Takes the switches above out of argv (exit 2 with a message on a bad value). */
void variant_args(int *argc, char **argv, variant_args_t *v);
/* Local SGD over the registered parameters (and the optimizer's moments with
 * --local-sgd-state): puts the layer in no_sync; exits on error. */
braid_ddp_localsgd_t variant_localsgd(mlp_t *m, braid_ddp_t ddp, braid_comm_t comm,
                                      const variant_args_t *v);
/* --async (async.c): trains with braid_ps parameter servers and returns the exit status
 * (destroys comm). */
typedef struct {
    int epochs, batch, max_steps, warmup;
    int eval_every; /* --eval-every K: worker 0 prints an eval line every K of its steps */
    uint64_t seed;
} async_run_t;
int variant_async(mlp_t *m, const dataset_t *train, const dataset_t *test, const async_run_t *run,
                  const variant_args_t *v, braid_comm_t comm);
/* With --max-steps (main.c): prints `step_ms M backward_ms B finish_ms F steps K mean_step_ms X`
 * (milliseconds): the medians of the step, backward and finish times (the arrays, seconds per
 * step) over the K steps after the first warmup of nsteps, and the mean step; sorts them. */
void print_step_times(double *t_step, double *t_bwd, double *t_fin, int nsteps, int warmup);
/* The same permutation of [0, n) on every rank, from (seed, epoch) (main.c). */
void permute(int *perm, int n, uint64_t seed, int epoch);
/* --slow-rank/--slow-factor: on that rank, sleeps (F - 1) * compute_s. */
void variant_slow(const variant_args_t *v, int rank, double compute_s);

#endif
