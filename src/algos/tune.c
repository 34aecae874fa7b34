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
 *   oversub_us                  extra latency per step per rank beyond the cores (>= 0)
 *   net_overlap                 1 if the network's queue absorbs a call's bytes (a token-bucket
 *                               shaped link), 0 (default) if each message serializes (>= 0)
 * A key may be left out (it keeps its built-in default); an unknown key, a malformed line or a
 * value out of range is an error naming the file, line and key.
 *
 * BRAID_TUNE_MEASURE=N (1..20) measures the links at init instead (tens of ms times N: N
 * scales the number of calls each median is taken over; collective; internal
 * sub-communicators take their parent's numbers and measure nothing). Every rank runs
 * recursive-doubling all-reduces of 8 B and, with several hosts of equal size, hierarchical
 * ones of 8 B per rank (so the step latencies within and between hosts both come out), ring
 * all-reduces of 1 MiB (the slowest link's bandwidth), and with several hosts a probe that
 * tells whether the network serializes a call's bytes after its latency or absorbs them in
 * its queue (net_overlap); the model's formulas are inverted for the constants, each from the
 * median call. Rank 0's numbers reach every rank with the tuning file's allgather. */
#include "algos/algo.h"
#include "algos/plan.h"
#include "core/bootstrap.h"
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
    {"oversub_us", MODEL_FIELD(oversub_us), 1},       {"net_overlap", MODEL_FIELD(net_overlap), 1},
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
                                  "oversub_us, net_overlap)",
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

/* Median time of `iters` float32 sum all-reduces of count elements with algorithm `algo`
 * (ring, recdbl or hier). The median, not the best: the model should predict a typical call,
 * and on a busy or oversubscribed machine the best one is a lucky exception. */
static braid_result_t median_allreduce_us(struct braid_comm *c, braid_algo_state_t *st, int algo,
                                          float *buf, size_t count, int iters, double *med_p)
{
    braid_op_args_t a = {.coll = BRAID_COLL_ALLREDUCE,
                         .sendbuf = buf,
                         .recvbuf = buf,
                         .count = count,
                         .dtype = BRAID_FLOAT32,
                         .op = BRAID_SUM,
                         .root = -1};
    double *t = malloc((size_t)iters * sizeof(double));
    if (!t) return braid_set_error(BRAID_ERR_NOMEM, "tuning: out of memory for %d times", iters);
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        uint32_t seq = ++c->seq;
        BRAID_CHECK(algo == BRAID_ALGO_RING ? braid_engine_run(c, &a, seq)
                    : algo == BRAID_ALGO_RECDBL
                        ? braid_engine_run_plan(c, &a, seq, BRAID_PLAN_RECDBL)
                        : braid_hier_run(c, st, &a, seq));
        t[i] = now_us() - t0;
    }
    for (int i = 1; i < iters; i++) /* insertion sort: a few hundred values at most */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *med_p = t[iters / 2];
    free(t);
    return BRAID_SUCCESS;
}

static double clamp_alpha(double a)
{
    return a > 0.05 ? a : 0.05;
}

/* Latencies from 8-byte calls, inverting select.c's formulas. Recursive doubling runs ri
 * rounds within hosts and rn over the network: t - launch = ri a_s + rn a_n (a = alpha plus
 * the oversubscription penalty). With several hosts of equal size L >= 2 the hierarchical
 * all-reduce gives a second equation, t - 3 launch = 2 (L-1) a_s + k a_n (the intra-host
 * ring reduce-scatter and all-gather, and k network steps of what the inter-host
 * sub-communicator runs), so both links are measured. */
static braid_result_t measure_alphas(struct braid_comm *c, braid_algo_state_t *st, float *buf,
                                     int reps, double *t_rd_p)
{
    braid_model_t *m = &st->model;
    int R = braid_model_rounds(BRAID_ALGO_RECDBL, c->nranks);
    double p = braid_model_step_penalty_us(m), t_rd = 0, t_h = 0;
    BRAID_CHECK(median_allreduce_us(c, st, BRAID_ALGO_RECDBL, buf, 2, 31 * reps, &t_rd));
    *t_rd_p = t_rd;
    int L = m->min_local, H = m->nhosts;
    if (H < 2) {
        m->intra.alpha_us = clamp_alpha((t_rd - m->launch_us) / R - p);
        return BRAID_SUCCESS;
    }
    int ri = m->recdbl_intra_rounds, rn = R - ri;
    if (L < 2 || m->min_local != m->max_local) {
        m->inter.alpha_us = clamp_alpha(
            (t_rd - m->launch_us - ri * (m->intra.alpha_us + p)) / (rn > 0 ? rn : 1) - p);
        return BRAID_SUCCESS;
    }
    BRAID_CHECK(median_allreduce_us(c, st, BRAID_ALGO_HIER, buf, 2 * (size_t)L, 31 * reps, &t_h));
    /* what the inter-host sub-communicator ran for its 8 bytes */
    const braid_algo_state_t *is = st->inter ? st->inter->algo_state : NULL;
    int k = is && braid_model_choose(BRAID_COLL_ALLREDUCE, 8, 2, &is->model) == BRAID_ALGO_RECDBL
                ? braid_model_rounds(BRAID_ALGO_RECDBL, H)
                : 2 * (H - 1);
    /* [ri rn; 2(L-1) k] [a_s a_n]' = [y1 y2]' */
    double y1 = t_rd - m->launch_us, y2 = t_h - 3 * m->launch_us;
    double det = ri * k - 2.0 * (L - 1) * rn, a_s = 0, a_n = 0;
    if (det != 0) {
        a_s = (y1 * k - rn * y2) / det;
        a_n = (ri * y2 - 2.0 * (L - 1) * y1) / det;
    }
    if (det == 0 || a_n < a_s) {
        /* A network step cheaper than a step within a host is no machine's truth: the
         * hierarchical call carries overhead its steps do not explain (sub-collectives
         * waiting for ranks to be scheduled, on an oversubscribed machine). Then every step
         * costs one alpha and each (sub-)collective a launch: t_rd = launch + R a,
         * t_h = 3 launch + K a. */
        int R_all = ri + rn, K = 2 * (L - 1) + k;
        double launch = 3 * R_all != K ? (R_all * t_h - K * t_rd) / (3.0 * R_all - K) : -1;
        if (launch > m->launch_us) m->launch_us = launch;
        a_s = a_n = (t_rd - m->launch_us) / R_all;
    }
    m->intra.alpha_us = clamp_alpha(a_s - p);
    m->inter.alpha_us = clamp_alpha(a_n - p);
    braid_info(TUNING,
               "measured at init: recdbl 8 B %.1f us, hier 8 B %.1f us -> shm %.2f us, "
               "net %.2f us per step, %.2f us per (sub-)collective",
               t_rd, t_h, m->intra.alpha_us, m->inter.alpha_us, m->launch_us);
    return BRAID_SUCCESS;
}

/* Every rank takes rank 0's link constants and launch cost (what follows must use the same
 * sizes everywhere). */
typedef struct {
    braid_link_model_t intra, inter;
    double launch_us;
} measured_t;

static braid_result_t take_rank0(struct braid_comm *c, braid_model_t *m)
{
    measured_t mine = {m->intra, m->inter, m->launch_us},
               *all = malloc((size_t)c->nranks * sizeof(mine));
    if (!all) return braid_set_error(BRAID_ERR_NOMEM, "tuning: out of memory sharing links");
    braid_result_t res = braid_boot_allgather(c->boot, &mine, all, sizeof(mine));
    if (res == BRAID_SUCCESS) {
        m->intra = all[0].intra;
        m->inter = all[0].inter;
        m->launch_us = all[0].launch_us;
    }
    free(all);
    return res;
}

braid_result_t braid_tuning_measure(struct braid_comm *c, braid_algo_state_t *st, int reps)
{
    if (reps < 1) reps = 1;
    braid_model_t *m = &st->model;
    int n = c->nranks;
    if (n < 2) return BRAID_SUCCESS;
    size_t big = (size_t)1 << 18; /* 1 MiB of float32 */
    float *buf = calloc(big, sizeof(float));
    if (!buf) return braid_set_error(BRAID_ERR_NOMEM, "tuning: out of memory measuring links");
    double t_rd = 0, t_big = 0, t_probe = 0;
    size_t probe = 0;
    braid_result_t res = measure_alphas(c, st, buf, reps, &t_rd);
    if (res == BRAID_SUCCESS)
        res = median_allreduce_us(c, st, BRAID_ALGO_RING, buf, big, 3 * reps, &t_big);
    /* the ring's bandwidth term, the slowest link (the network with several hosts) */
    braid_link_model_t *l = m->nhosts > 1 ? &m->inter : &m->intra;
    if (res == BRAID_SUCCESS) {
        double f = (double)(n - 1) / n, ref = l->gbps;
        l->gbps = 1e9; /* latency only */
        double lat = braid_model_time(BRAID_ALGO_RING, BRAID_COLL_ALLREDUCE, 0, 0, m);
        double rest = t_big - lat, bytes = 2 * f * (double)big * sizeof(float);
        l->gbps = rest > 0 ? bytes * (m->nhosts > 1 ? m->ring_host_out : 1) / rest / 1e3 : ref;
    }
    /* Does the network serialize each call's bytes after its latency, or absorb them in its
     * queue (a shaper's bucket)? Recursive doubling at the size where the model's byte term
     * equals its latency tells: the sum predicts twice the latency, the overlap once. */
    if (res == BRAID_SUCCESS && m->nhosts > 1) res = take_rank0(c, m);
    if (res == BRAID_SUCCESS && m->nhosts > 1) {
        m->net_overlap = 0;
        double lat = braid_model_time(BRAID_ALGO_RECDBL, BRAID_COLL_ALLREDUCE, 8, 2, m);
        double per_byte =
            braid_model_time(BRAID_ALGO_RECDBL, BRAID_COLL_ALLREDUCE, 1 << 20, 1 << 18, m) - lat;
        probe = per_byte > 0 ? (size_t)(lat / per_byte * (1 << 20)) / 4 : 0;
        if (probe < 16) probe = 16;
        if (probe > big) probe = big;
        res = median_allreduce_us(c, st, BRAID_ALGO_RECDBL, buf, probe, 31 * reps, &t_probe);
        double sum = braid_model_time(BRAID_ALGO_RECDBL, BRAID_COLL_ALLREDUCE, probe * 4, probe, m);
        m->net_overlap = 1;
        double over =
            braid_model_time(BRAID_ALGO_RECDBL, BRAID_COLL_ALLREDUCE, probe * 4, probe, m);
        m->net_overlap = t_probe * t_probe < sum * over ? 1 : 0; /* nearer in ratio */
    }
    free(buf);
    if (res < 0) return res;
    braid_info(TUNING,
               "measured at init: %s %.2f us + %.3f GB/s (recdbl 8 B %.1f us, ring 1 MiB %.1f "
               "us); network %s (recdbl %zu B %.1f us)",
               m->nhosts > 1 ? "net" : "shm", l->alpha_us, l->gbps, t_rd, t_big,
               m->net_overlap > 0 ? "absorbs a call's bytes" : "serializes them", probe * 4,
               t_probe);
    return BRAID_SUCCESS;
}
