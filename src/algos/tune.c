/* Tuning files: the cost model's measured constants (written by `braid-info --tune --measure`
 * under a launcher, read at init from BRAID_TUNING_FILE by rank 0 and spread to every rank by
 * a bootstrap allgather, so every rank's model is the same).
 *
 * Format: one `key value` pair per line, '#' starts a comment, blank lines ignored. Keys (every
 * value a finite number > 0 unless noted):
 *   shm_alpha_us  shm_gbps      one message within a host: latency (us), bandwidth (GB/s)
 *   net_alpha_us  net_gbps      one message between hosts
 *   copy_gbps                   a local memcpy
 *   launch_us                   fixed cost of one (sub-)collective (>= 0)
 *   oversub_us                  extra latency per ring step per rank beyond the cores (>= 0)
 * A key may be left out (it keeps its built-in default); an unknown key, a malformed line or a
 * value out of range is an error naming the file, line and key.
 *
 * BRAID_TUNE_MEASURE=1 measures the slowest link at init instead (a few ms, collective: every
 * rank runs recursive-doubling all-reduces of 8 B and ring all-reduces of 1 MiB, and the
 * model's formulas are inverted for alpha and bandwidth); rank 0's numbers reach every rank
 * with the tuning file's allgather. */
#include "algos/algo.h"
#include "algos/plan.h"
#include "core/engine.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *key;
    size_t off;
    int zero_ok;
} tune_key_t;

#define MODEL_FIELD(f) offsetof(braid_model_t, f)
static const tune_key_t keys[] = {
    {"shm_alpha_us", MODEL_FIELD(intra.alpha_us), 0}, {"shm_gbps", MODEL_FIELD(intra.gbps), 0},
    {"net_alpha_us", MODEL_FIELD(inter.alpha_us), 0}, {"net_gbps", MODEL_FIELD(inter.gbps), 0},
    {"copy_gbps", MODEL_FIELD(copy.gbps), 0},         {"launch_us", MODEL_FIELD(launch_us), 1},
    {"oversub_us", MODEL_FIELD(oversub_us), 1},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

braid_result_t braid_tuning_read(const char *path, braid_model_t *m)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_TUNING_FILE: cannot open '%s': %m",
                               path);
    braid_model_t t = *m;
    char line[256];
    int lineno = 0;
    braid_result_t res = BRAID_SUCCESS;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char key[64], extra[8];
        double v = 0;
        int k = sscanf(line, " %63s %lf %7s", key, &v, extra);
        if (k <= 0) continue; /* blank or comment */
        const tune_key_t *e = NULL;
        for (size_t i = 0; i < NKEYS; i++)
            if (k >= 1 && !strcmp(key, keys[i].key)) e = &keys[i];
        if (!e) {
            res = braid_set_error(BRAID_ERR_INVALID_ARG,
                                  "BRAID_TUNING_FILE %s:%d: unknown key '%s' (known: shm_alpha_us, "
                                  "shm_gbps, net_alpha_us, net_gbps, copy_gbps, launch_us, "
                                  "oversub_us)",
                                  path, lineno, key);
            break;
        }
        if (k != 2 || !isfinite(v) || v < 0 || (v == 0 && !e->zero_ok) || v > 1e9) {
            res = braid_set_error(BRAID_ERR_INVALID_ARG,
                                  "BRAID_TUNING_FILE %s:%d: %s needs one number %s", path, lineno,
                                  key, e->zero_ok ? ">= 0" : "> 0");
            break;
        }
        *(double *)((char *)&t + e->off) = v;
    }
    fclose(f);
    if (res == BRAID_SUCCESS) *m = t;
    return res;
}

void braid_tuning_write(FILE *f, const braid_model_t *m, const char *comment)
{
    if (comment && *comment) fprintf(f, "# %s\n", comment);
    for (size_t i = 0; i < NKEYS; i++)
        fprintf(f, "%s %.6g\n", keys[i].key, *(const double *)((const char *)m + keys[i].off));
}

/* ---- measured at init (BRAID_TUNE_MEASURE=1) ----------------------------------------------- */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* Best time of `iters` all-reduces of count float32 on plan family `plan` (ring or recdbl). */
static braid_result_t best_allreduce_us(struct braid_comm *c, int plan, float *buf, size_t count,
                                        int iters, double *best_p)
{
    braid_op_args_t a = {.coll = BRAID_COLL_ALLREDUCE,
                         .sendbuf = buf,
                         .recvbuf = buf,
                         .count = count,
                         .dtype = BRAID_FLOAT32,
                         .op = BRAID_SUM,
                         .root = -1};
    double best = 1e30;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        BRAID_CHECK(plan == BRAID_PLAN_RING ? braid_engine_run(c, &a, ++c->seq)
                                            : braid_engine_run_plan(c, &a, ++c->seq, plan));
        double t = now_us() - t0;
        if (t < best) best = t;
    }
    *best_p = best;
    return BRAID_SUCCESS;
}

braid_result_t braid_tuning_measure(struct braid_comm *c, braid_model_t *m)
{
    int n = c->nranks;
    if (n < 2) return BRAID_SUCCESS;
    size_t big = (size_t)1 << 18; /* 1 MiB of float32 */
    float *buf = calloc(big, sizeof(float));
    if (!buf) return braid_set_error(BRAID_ERR_NOMEM, "tuning: out of memory measuring links");
    double t_small = 0, t_big = 0;
    braid_result_t res = best_allreduce_us(c, BRAID_PLAN_RECDBL, buf, 2, 30, &t_small);
    if (res == BRAID_SUCCESS) res = best_allreduce_us(c, BRAID_PLAN_RING, buf, big, 2, &t_big);
    free(buf);
    if (res < 0) return res;
    /* Invert the model's own formulas (select.c) for the slowest link: recursive doubling's
     * R rounds of one message, then the ring's bandwidth term. */
    int P = 1, R = 0;
    while (P * 2 <= n) {
        P *= 2;
        R++;
    }
    if (P < n) R += 2;
    double p = braid_model_step_penalty_us(m);
    braid_link_model_t *l = m->nhosts > 1 ? &m->inter : &m->intra;
    double alpha = (t_small - m->launch_us) / R - p;
    l->alpha_us = alpha > 0.05 ? alpha : 0.05;
    int x = m->ring_crossings;
    double f = (double)(n - 1) / n;
    double lap = x * m->inter.alpha_us + (n - x) * m->intra.alpha_us + n * p;
    double rest = t_big - m->launch_us - 2 * f * lap, bytes = 2 * f * (double)big * sizeof(float);
    if (rest > 0) l->gbps = bytes * (m->nhosts > 1 ? m->ring_host_out : 1) / rest / 1e3;
    braid_info(TUNING,
               "measured at init: %s %.2f us + %.3f GB/s (recdbl 8 B %.1f us, ring 1 MiB %.1f "
               "us)",
               m->nhosts > 1 ? "net" : "shm", l->alpha_us, l->gbps, t_small, t_big);
    return BRAID_SUCCESS;
}
