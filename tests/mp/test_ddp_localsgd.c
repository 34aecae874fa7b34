/* Suite `ddp_localsgd`: local SGD (braid_ddp_localsgd_*) on 1..4 ranks as real processes.
 *
 * period 1 against plain DDP, SGD with momentum 0.9 (the DDP layer averages the gradients,
 * every replica steps on the average). Local SGD steps each rank on its own gradient and
 * averages the parameters (optionally the momentum too) after every step. In exact arithmetic
 * both give the same parameters: avg_r(p - lr * (mu m_r + g_r)) = p - lr * (mu avg(m_r) +
 * avg(g_r)), and avg(m_r) follows DDP's momentum by induction (the update is linear). In float32
 * they differ by rounding only: one rounding in each local update, the n-term sum and the
 * division of the average, against the same in DDP's gradient average; a few units of 2^-24 of
 * the parameters (|p| < 2) per step, so after 10 steps within 2e-6 (the bound checked;
 * observed: printed). With one rank the average of one value is exact: bit-identical. The
 * checks have teeth: before each average the ranks' locally stepped parameters differ from
 * DDP's by orders of magnitude more (checked > 100x the bound for n > 1).
 *
 * period 3 against an independent reference: every rank simulates all n replicas in plain
 * loops (each on its own samples, momentum SGD, every 3rd step the replicas' parameters, and
 * with state averaging their momentum, replaced by their mean, summed in rank order in
 * float32 then divided by n) and compares its own replica after every step; braid may sum in
 * another order, hence the same 2e-6. A final sync averages a partial period. */
#include "ddp_model.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int g_dims[4] = {7, 11, 9, 5};
#define LR 0.05f
#define MU 0.9f
#define STEPS 10
#define TOL 2e-6

static void momentum_step(dm_model_t *m, float **mom)
{
    for (int i = 0; i < m->nparams; i++)
        for (size_t e = 0; e < m->count[i]; e++) {
            mom[i][e] = MU * mom[i][e] + m->g[i][e];
            m->p[i][e] -= LR * mom[i][e];
        }
}

static void zero_grads(dm_model_t *m)
{
    for (int i = 0; i < m->nparams; i++)
        memset(m->g[i], 0, m->count[i] * sizeof(float));
}

static double maxabs(const dm_model_t *a, const dm_model_t *b)
{
    double d = 0;
    for (int i = 0; i < a->nparams; i++)
        for (size_t e = 0; e < a->count[i]; e++)
            d = fmax(d, fabs((double)a->p[i][e] - (double)b->p[i][e]));
    return d;
}

static long sample_base(int step, int rank)
{
    return (long)step * 40 + rank * 5;
}

/* The buffers to average: the parameters, then (with state) the momentum buffers. */
static int localsgd_bufs(const dm_model_t *m, float **mom, int state, braid_ddp_param_t *out)
{
    int k = 0;
    for (int i = 0; i < m->nparams; i++)
        out[k++] = (braid_ddp_param_t){m->p[i], NULL, m->count[i], BRAID_FLOAT32, m->names[i], 0};
    for (int i = 0; state && i < m->nparams; i++)
        out[k++] = (braid_ddp_param_t){mom[i], NULL, m->count[i], BRAID_FLOAT32, "momentum", 0};
    return k;
}

static int ready_all(braid_ddp_t ddp, int np)
{
    for (int i = np - 1; i >= 0; i--)
        if (braid_ddp_grad_ready(ddp, i)) return 1;
    return 0;
}

static int k1_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    int state = *(const int *)arg;
    dm_model_t a, l;
    dm_init(&a, 3, g_dims, 5);
    dm_init(&l, 3, g_dims, 5 + rank); /* the DDP layer's broadcast makes it rank 0's */
    float *ma[8], *ml[8];
    for (int i = 0; i < a.nparams; i++) {
        ma[i] = calloc(a.count[i], sizeof(float));
        ml[i] = calloc(a.count[i], sizeof(float));
    }
    braid_ddp_param_t pa[8], pl[8], bufs[16];
    dm_params(&a, pa);
    dm_params(&l, pl);
    braid_ddp_t da, dl;
    MP_CHECK(rank, !braid_ddp_create(&da, comm, pa, a.nparams, NULL), "%s", braid_ddp_last_error());
    MP_CHECK(rank, !braid_ddp_create(&dl, comm, pl, l.nparams, NULL), "%s", braid_ddp_last_error());
    MP_OK(rank, braid_ddp_no_sync(dl, 1)); /* local steps: the layer never communicates */
    MP_CHECK(rank, maxabs(&a, &l) == 0, "initial parameters differ");
    braid_ddp_localsgd_t ls;
    int nb = localsgd_bufs(&l, ml, state, bufs);
    MP_CHECK(rank, !braid_ddp_localsgd_create(&ls, comm, bufs, nb, 1), "%s",
             braid_ddp_last_error());
    double maxd = 0, minpre = 1e30;
    for (int step = 1; step <= STEPS; step++) {
        int err = 0;
        zero_grads(&a);
        zero_grads(&l);
        dm_backward(&a, sample_base(step, rank), 5, 5, NULL, NULL, &err);
        dm_backward(&l, sample_base(step, rank), 5, 5, NULL, NULL, &err);
        MP_CHECK(rank, !ready_all(da, a.nparams), "%s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_finish(da), "%s", braid_ddp_last_error());
        momentum_step(&a, ma);
        MP_CHECK(rank, !ready_all(dl, l.nparams), "%s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_finish(dl), "%s", braid_ddp_last_error());
        momentum_step(&l, ml);
        minpre = fmin(minpre, maxabs(&a, &l));
        int avg = 0;
        MP_CHECK(rank, !braid_ddp_localsgd_step(ls, &avg), "%s", braid_ddp_last_error());
        MP_CHECK(rank, avg == 1, "period 1 did not average at step %d", step);
        double d = maxabs(&a, &l);
        MP_CHECK(rank, d <= TOL, "step %d: local SGD (period 1) differs from DDP by %.3g", step, d);
        maxd = fmax(maxd, d);
        uint64_t h = dm_hash(&l), all[8];
        MP_OK(rank, braid_allgather(&h, all, 1, BRAID_UINT64, comm));
        for (int q = 0; q < n; q++)
            MP_CHECK(rank, all[q] == all[0], "step %d: rank %d's average differs", step, q);
    }
    if (n == 1) MP_CHECK(rank, dm_hash(&a) == dm_hash(&l), "one rank: not bit-identical to DDP");
    if (n > 1)
        MP_CHECK(rank, minpre > 100 * TOL,
                 "before averaging the ranks were already within %.3g of DDP: the test would not "
                 "see a missing average",
                 minpre);
    long averages = 0;
    size_t bytes = braid_ddp_localsgd_bytes(ls, &averages);
    size_t per = 0;
    for (int i = 0; i < nb; i++)
        per += bufs[i].count * sizeof(float);
    MP_CHECK(rank, averages == STEPS && bytes == per * STEPS, "%ld averages, %zu bytes", averages,
             bytes);
    if (rank == 0)
        fprintf(stderr,
                "localsgd k=1 n=%d state=%d: max |local SGD - DDP| %.3g (before averaging "
                ">= %.3g)\n",
                n, state, maxd, minpre);
    braid_ddp_localsgd_destroy(ls);
    braid_ddp_destroy(da);
    braid_ddp_destroy(dl);
    for (int i = 0; i < a.nparams; i++) {
        free(ma[i]);
        free(ml[i]);
    }
    dm_free(&a);
    dm_free(&l);
    return 0;
}

Test(ddp_localsgd, period1_equals_ddp_with_momentum, .timeout = 120)
{
    for (int state = 0; state <= 1; state++)
        for (int n = 1; n <= 4; n++)
            cr_assert_eq(mp_run(n, k1_fn, &state, 60), 0, "n=%d state=%d (see stderr)", n, state);
}

#define PERIOD 3

/* Replaces every replica's buffer by the mean over the replicas (sum in replica order). */
static void ref_average(float ***bufs, int n, int nparams, const size_t *count)
{
    for (int i = 0; i < nparams; i++)
        for (size_t e = 0; e < count[i]; e++) {
            float s = 0;
            for (int q = 0; q < n; q++)
                s += bufs[q][i][e];
            s /= (float)n;
            for (int q = 0; q < n; q++)
                bufs[q][i][e] = s;
        }
}

static int kp_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    int state = *(const int *)arg;
    dm_model_t me, ref[4];
    dm_init(&me, 3, g_dims, 8);
    float *mm[8], *rm[4][8];
    float **rp_all[4], **rm_all[4];
    for (int q = 0; q < n; q++) {
        dm_init(&ref[q], 3, g_dims, 8);
        for (int i = 0; i < me.nparams; i++)
            rm[q][i] = calloc(me.count[i], sizeof(float));
        rp_all[q] = ref[q].p;
        rm_all[q] = rm[q];
    }
    for (int i = 0; i < me.nparams; i++)
        mm[i] = calloc(me.count[i], sizeof(float));
    braid_ddp_param_t bufs[16];
    int nb = localsgd_bufs(&me, mm, state, bufs);
    braid_ddp_localsgd_t ls;
    MP_CHECK(rank, !braid_ddp_localsgd_create(&ls, comm, bufs, nb, PERIOD), "%s",
             braid_ddp_last_error());
    double maxd = 0, spread = 0;
    for (int step = 1; step <= STEPS; step++) {
        int err = 0;
        zero_grads(&me);
        dm_backward(&me, sample_base(step, rank), 5, 5, NULL, NULL, &err);
        momentum_step(&me, mm);
        for (int q = 0; q < n; q++) {
            zero_grads(&ref[q]);
            dm_backward(&ref[q], sample_base(step, q), 5, 5, NULL, NULL, &err);
            momentum_step(&ref[q], rm[q]);
        }
        for (int q = 1; q < n; q++)
            spread = fmax(spread, maxabs(&ref[q], &ref[0]));
        int avg = 0;
        MP_CHECK(rank, !braid_ddp_localsgd_step(ls, &avg), "%s", braid_ddp_last_error());
        MP_CHECK(rank, avg == (step % PERIOD == 0), "step %d: averaged %d", step, avg);
        if (step == STEPS) {
            MP_CHECK(rank, !braid_ddp_localsgd_sync(ls), "%s", braid_ddp_last_error());
            avg = 1;
        }
        if (avg) {
            ref_average(rp_all, n, me.nparams, me.count);
            if (state) ref_average(rm_all, n, me.nparams, me.count);
        }
        double d = maxabs(&me, &ref[rank]);
        MP_CHECK(rank, d <= TOL, "step %d: rank %d differs from its reference replica by %.3g",
                 step, rank, d);
        maxd = fmax(maxd, d);
        if (state && avg) {
            double dm = 0;
            for (int i = 0; i < me.nparams; i++)
                for (size_t e = 0; e < me.count[i]; e++)
                    dm = fmax(dm, fabs((double)mm[i][e] - (double)rm[rank][i][e]));
            MP_CHECK(rank, dm <= TOL, "step %d: momentum differs from the reference by %.3g", step,
                     dm);
        }
    }
    if (n > 1)
        MP_CHECK(rank, spread > 100 * TOL,
                 "replicas never drifted apart (%.3g): averaging would go unnoticed", spread);
    long averages = 0;
    braid_ddp_localsgd_bytes(ls, &averages);
    MP_CHECK(rank, averages == STEPS / PERIOD + 1, "%ld averages", averages);
    MP_CHECK(rank, !braid_ddp_localsgd_sync(ls), "sync right after one");
    braid_ddp_localsgd_bytes(ls, &averages);
    MP_CHECK(rank, averages == STEPS / PERIOD + 1, "an empty sync averaged (%ld)", averages);
    if (rank == 0)
        fprintf(stderr,
                "localsgd k=%d n=%d state=%d: max |braid - reference| %.3g (replica drift "
                "%.3g)\n",
                PERIOD, n, state, maxd, spread);
    braid_ddp_localsgd_destroy(ls);
    for (int i = 0; i < me.nparams; i++)
        free(mm[i]);
    for (int q = 0; q < n; q++) {
        for (int i = 0; i < me.nparams; i++)
            free(rm[q][i]);
        dm_free(&ref[q]);
    }
    dm_free(&me);
    return 0;
}

Test(ddp_localsgd, period3_matches_simulated_replicas, .timeout = 120)
{
    for (int state = 0; state <= 1; state++)
        for (int n = 1; n <= 4; n++)
            cr_assert_eq(mp_run(n, kp_fn, &state, 60), 0, "n=%d state=%d (see stderr)", n, state);
}

static int bad_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float p[5] = {1, 2, 3, 4, (float)rank};
    braid_ddp_param_t b = {p, NULL, 5, BRAID_FLOAT32, "p", 0};
    braid_ddp_localsgd_t ls = NULL;
    braid_result_t r = braid_ddp_localsgd_create(&ls, comm, &b, 1, 0);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_ddp_last_error(), "period"),
             "period 0: %d %s", r, braid_ddp_last_error());
    r = braid_ddp_localsgd_create(&ls, comm, &b, 0, 2);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_ddp_last_error(), "nbufs"), "%s",
             braid_ddp_last_error());
    braid_ddp_param_t nul = {NULL, NULL, 5, BRAID_FLOAT32, "p", 0};
    r = braid_ddp_localsgd_create(&ls, comm, &nul, 1, 2);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_ddp_last_error(), "bufs[0].param"),
             "%s", braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_localsgd_step(NULL, NULL) == BRAID_ERR_INVALID_ARG, "NULL step");
    /* ranks disagreeing on the period: every rank gets a mismatch */
    r = braid_ddp_localsgd_create(&ls, comm, &b, 1, 2 + rank);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH && strstr(braid_ddp_last_error(), "period"),
             "periods differ: %d %s", r, braid_ddp_last_error());
    return 0;
}

Test(ddp_localsgd, bad_arguments_and_mismatched_periods, .timeout = 60)
{
    cr_assert_eq(mp_run(3, bad_fn, NULL, 30), 0, "see stderr");
}
