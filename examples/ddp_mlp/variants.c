/* The trainer's switches for local SGD and asynchronous data parallelism (issue 16), parsed
 * here and taken out of argv before main.c's getopt sees the rest, and the local SGD set-up.
 *
 *   --local-sgd K        every rank steps on its own gradients; parameters averaged every K
 *                        steps and at the end of every epoch
 *   --local-sgd-state    also average the optimizer's moments (momentum; Adam's m and v)
 *   --async              asynchronous DP with parameter servers (async.c)
 *   --servers S          the last S ranks are servers (1)
 *   --staleness B        bounded staleness (16): see braid_ps_options_t
 *   --slow-rank R        rank R sleeps after each step's computation ...
 *   --slow-factor F      ... (F - 1) times that computation's time, so it runs F times slower
 */
#include "ddp_mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int num(const char *flag, const char *val, double lo, double *out)
{
    char *end = NULL;
    if (!val) {
        fprintf(stderr, "ddp_mlp: %s needs a value\n", flag);
        exit(2);
    }
    double x = strtod(val, &end);
    if (!end || *end || end == val || x < lo) {
        fprintf(stderr, "ddp_mlp: %s '%s': expected a number >= %g\n", flag, val, lo);
        exit(2);
    }
    *out = x;
    return 1;
}

void variant_args(int *argc, char **argv, variant_args_t *v)
{
    *v = (variant_args_t){.servers = 1, .staleness = 16, .slow_rank = -1, .slow_factor = 1};
    int out = 1;
    double x;
    for (int i = 1; i < *argc; i++) {
        const char *f = argv[i], *val = i + 1 < *argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--local-sgd") && num(f, val, 1, &x)) {
            v->local_sgd = (int)x;
            i++;
        } else if (!strcmp(f, "--local-sgd-state")) {
            v->local_state = 1;
        } else if (!strcmp(f, "--async")) {
            v->async = 1;
        } else if (!strcmp(f, "--servers") && num(f, val, 1, &x)) {
            v->servers = (int)x;
            i++;
        } else if (!strcmp(f, "--staleness") && num(f, val, 0, &x)) {
            v->staleness = (int)x;
            i++;
        } else if (!strcmp(f, "--slow-rank") && num(f, val, 0, &x)) {
            v->slow_rank = (int)x;
            i++;
        } else if (!strcmp(f, "--slow-factor") && num(f, val, 1, &x)) {
            v->slow_factor = x;
            i++;
        } else {
            argv[out++] = argv[i];
        }
    }
    argv[out] = NULL;
    *argc = out;
    if (v->local_state && !v->local_sgd) {
        fprintf(stderr, "ddp_mlp: --local-sgd-state needs --local-sgd K\n");
        exit(2);
    }
    if (v->local_sgd && v->async) {
        fprintf(stderr, "ddp_mlp: --local-sgd and --async exclude each other\n");
        exit(2);
    }
}

braid_ddp_localsgd_t variant_localsgd(mlp_t *m, braid_ddp_t ddp, braid_comm_t comm,
                                      const variant_args_t *v)
{
    braid_ddp_param_t bufs[3 * MLP_MAX_PARAMS];
    int k = 0;
    for (int i = 0; i < m->nparams; i++) {
        bufs[k++] = m->reg[i];
        if (v->local_state)
            bufs[k++] =
                (braid_ddp_param_t){m->m1[i], NULL, m->reg[i].count, BRAID_FLOAT32, "m1", 0};
        if (v->local_state && m->adam)
            bufs[k++] =
                (braid_ddp_param_t){m->m2[i], NULL, m->reg[i].count, BRAID_FLOAT32, "m2", 0};
    }
    braid_ddp_localsgd_t ls = NULL;
    braid_result_t r = braid_ddp_no_sync(ddp, 1);
    if (!r) r = braid_ddp_localsgd_create(&ls, comm, bufs, k, v->local_sgd);
    if (r) {
        fprintf(stderr, "ddp_mlp: local SGD set-up failed: %s: %s\n", braid_strerror(r),
                braid_ddp_last_error());
        braid_comm_destroy(comm);
        exit(1);
    }
    return ls;
}

void variant_slow(const variant_args_t *v, int rank, double compute_s)
{
    if (rank != v->slow_rank || v->slow_factor <= 1 || compute_s <= 0) return;
    double s = (v->slow_factor - 1) * compute_s;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}
