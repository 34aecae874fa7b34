/* Suite `ddp_powersgd`: the PowerSGD hook of the DDP layer on 1..4 real ranks.
 *
 * 1. Against a reference: every rank simulates all n ranks in double precision from the same
 *    deterministic per-rank gradients (the algorithm as written in ddp.h: M = g + e; P = sum M Q;
 *    Gram-Schmidt; Q = sum M^T P / n; approx = P Q^T; e = M - approx; Q kept), with the initial
 *    Q from the formula documented in ddp.h (re-implemented here), over 5 steps; the hook's
 *    averaged gradients and its error buffer must agree within 2e-4 of the matrix's largest
 *    |M|. Justification: the hook computes in float32 (unit roundoff 6e-8) sums of at most
 *    cols * n terms and a Gram-Schmidt of a well-conditioned random P; the observed difference
 *    is printed (about 1e-6); a wrong transpose, scale, missing orthogonalisation or error
 *    term is off by O(1). Raw (vector, small-matrix) parameters: the plain average.
 * 2. An exactly low-rank gradient: rank q's gradient is U V_q (U shared, rank r), so the sum has
 *    rank <= r and the first step reproduces the average exactly (within 1e-5 relative), with
 *    no reference at all.
 * 3. Error feedback accumulates what was dropped: sum over steps of the hook's output plus the
 *    ranks' average error equals the sum of the average gradients (all-reduced error buffers).
 * 4. Bytes per step: the hook's count equals 2(n-1)/n * 4 * (sum over compressed matrices of
 *    (rows + cols) * r + the raw counts), against (rows * cols) for the default all-reduce. */
#include "braid/ddp.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NP 5
#define R 2
#define STEPS 5
/* registration: A 30x40, v 13, B 16x24, C 5x7 (too small to compress at r = 2), w 1 */
static const size_t g_rows[NP] = {30, 1, 16, 5, 1}, g_cols[NP] = {40, 13, 24, 7, 1};

static int compressed(int p)
{
    size_t r = g_rows[p], c = g_cols[p];
    return r > 1 && c > 1 && (double)(r * c) >= 2.0 * (double)((r + c) * R);
}

static double grad(int q, int step, int p, size_t e, int lowrank)
{
    if (lowrank && compressed(p)) { /* U (shared) times V_q: rank R */
        size_t i = e / g_cols[p], c = e % g_cols[p];
        double s = 0;
        for (int j = 0; j < R; j++)
            s += sin(0.3 * (double)i + 1.1 * j + p) * cos(0.17 * (double)c * (j + 1) + q + step);
        return s;
    }
    return sin(0.37 * (double)e + 1.3 * p + 0.71 * step) * (1 + 0.25 * q) +
           0.01 * cos((double)e * q);
}

static double q0(int p, size_t k, size_t j)
{
    uint64_t z = ((uint64_t)p << 40) + (uint64_t)(k * R + j) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 2.0 * (double)(z >> 11) / 9007199254740992.0 - 1.0;
}

/* the reference state of every rank, in double */
typedef struct {
    double *err[8][NP], *q[NP];
} ref_t;

/* One step of the reference; out[p] = the average approximation (or raw average). */
static void ref_step(ref_t *rf, int n, int step, int lowrank, double **out)
{
    for (int p = 0; p < NP; p++) {
        size_t rows = g_rows[p], cols = g_cols[p], cnt = rows * cols;
        if (!compressed(p)) {
            for (size_t e = 0; e < cnt; e++) {
                double s = 0;
                for (int q = 0; q < n; q++)
                    s += grad(q, step, p, e, lowrank);
                out[p][e] = s / n;
            }
            continue;
        }
        double *M[8];
        for (int q = 0; q < n; q++) {
            M[q] = malloc(cnt * sizeof(double));
            for (size_t e = 0; e < cnt; e++)
                M[q][e] = grad(q, step, p, e, lowrank) + rf->err[q][p][e];
        }
        double *P = calloc(rows * R, sizeof(double)), *Q = calloc(cols * R, sizeof(double));
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < rows; i++)
                for (int j = 0; j < R; j++)
                    for (size_t c = 0; c < cols; c++)
                        P[i * R + j] += M[q][i * cols + c] * rf->q[p][c * R + j];
        for (int i = 0; i < R; i++) {
            double nn = 0;
            for (size_t k = 0; k < rows; k++)
                nn += P[k * R + i] * P[k * R + i];
            for (size_t k = 0; k < rows && nn > 0; k++)
                P[k * R + i] /= sqrt(nn);
            for (int j = i + 1; j < R; j++) {
                double d = 0;
                for (size_t k = 0; k < rows; k++)
                    d += P[k * R + i] * P[k * R + j];
                for (size_t k = 0; k < rows; k++)
                    P[k * R + j] -= d * P[k * R + i];
            }
        }
        for (int q = 0; q < n; q++)
            for (size_t c = 0; c < cols; c++)
                for (int j = 0; j < R; j++)
                    for (size_t i = 0; i < rows; i++)
                        Q[c * R + j] += M[q][i * cols + c] * P[i * R + j] / n;
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < cols; c++) {
                double a = 0;
                for (int j = 0; j < R; j++)
                    a += P[i * R + j] * Q[c * R + j];
                out[p][i * cols + c] = a;
                for (int q = 0; q < n; q++)
                    rf->err[q][p][i * cols + c] = M[q][i * cols + c] - a;
            }
        memcpy(rf->q[p], Q, cols * R * sizeof(double));
        for (int q = 0; q < n; q++)
            free(M[q]);
        free(P);
        free(Q);
    }
}

static int psgd_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const int lowrank = *(const int *)arg;
    float *prm[NP], *g[NP], *acc[NP];
    double *out[NP], *sum_avg[NP];
    braid_ddp_param_t ps[NP];
    ref_t rf;
    memset(&rf, 0, sizeof(rf));
    for (int p = 0; p < NP; p++) {
        size_t cnt = g_rows[p] * g_cols[p];
        prm[p] = calloc(cnt, sizeof(float));
        g[p] = calloc(cnt, sizeof(float));
        acc[p] = calloc(cnt, sizeof(float));
        out[p] = calloc(cnt, sizeof(double));
        sum_avg[p] = calloc(cnt, sizeof(double));
        ps[p] = (braid_ddp_param_t){prm[p], g[p], cnt, BRAID_FLOAT32, NULL, g_rows[p]};
        for (int q = 0; q < n; q++)
            rf.err[q][p] = calloc(cnt, sizeof(double));
        rf.q[p] = calloc(g_cols[p] * R, sizeof(double));
        for (size_t k = 0; k < g_cols[p]; k++)
            for (size_t j = 0; j < R; j++)
                rf.q[p][k * R + j] = q0(p, k, j);
    }
    braid_ddp_powersgd_options_t po;
    braid_ddp_powersgd_options_init(&po);
    po.rank = R;
    braid_ddp_hook_t hook;
    MP_OK(rank, braid_ddp_hook_powersgd(&hook, &po));
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.first_bucket_bytes = 2048;
    o.bucket_cap_bytes = 4096;
    o.hook = &hook;
    braid_ddp_t ddp;
    MP_CHECK(rank, !braid_ddp_create(&ddp, comm, ps, NP, &o), "create: %s", braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_num_buckets(ddp) == 2, "%d buckets", braid_ddp_num_buckets(ddp));
    double worst = 0;
    int steps = lowrank ? 3 : STEPS;
    for (int step = 1; step <= steps; step++) {
        for (int p = 0; p < NP; p++)
            for (size_t e = 0; e < g_rows[p] * g_cols[p]; e++) {
                g[p][e] = (float)grad(rank, step, p, e, lowrank);
                double s = 0;
                for (int q = 0; q < n; q++)
                    s += (float)grad(q, step, p, e, lowrank);
                sum_avg[p][e] += s / n;
            }
        for (int p = NP - 1; p >= 0; p--)
            MP_CHECK(rank, !braid_ddp_grad_ready(ddp, p), "ready: %s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_finish(ddp), "finish: %s", braid_ddp_last_error());
        ref_step(&rf, n, step, lowrank, out);
        for (int p = 0; p < NP; p++) {
            size_t cnt = g_rows[p] * g_cols[p];
            double mx = 0, d = 0, de = 0;
            for (size_t e = 0; e < cnt; e++) {
                mx = fmax(mx, fabs(out[p][e]));
                d = fmax(d, fabs((double)g[p][e] - out[p][e]));
                acc[p][e] += g[p][e];
            }
            const float *err = braid_ddp_powersgd_error(&hook, p);
            MP_CHECK(rank, !err == !compressed(p), "param %d: error buffer %p", p, (void *)err);
            for (size_t e = 0; err && e < cnt; e++)
                de = fmax(de, fabs((double)err[e] - rf.err[rank][p][e]));
            if (lowrank && step == 1) {
                /* exactly rank <= R: the average itself */
                double ad = 0;
                for (size_t e = 0; e < cnt; e++) {
                    double s = 0;
                    for (int q = 0; q < n; q++)
                        s += grad(q, step, p, e, 1);
                    ad = fmax(ad, fabs((double)g[p][e] - s / n));
                }
                MP_CHECK(rank, ad <= 1e-5 * fmax(mx, 1e-30),
                         "low-rank param %d: |hook - average| %.3g (max %.3g)", p, ad, mx);
            }
            double tol = 2e-4 * fmax(mx, 1e-30);
            MP_CHECK(rank, d <= tol && de <= tol,
                     "step %d param %d: |hook - reference| %.3g, error buffer %.3g (tol %.3g)",
                     step, p, d, de, tol);
            worst = fmax(worst, fmax(d, de) / fmax(mx, 1e-30));
        }
    }
    /* error feedback: sum of outputs + average error == sum of average gradients */
    for (int p = 0; p < NP; p++) {
        const float *err = braid_ddp_powersgd_error(&hook, p);
        size_t cnt = g_rows[p] * g_cols[p];
        float *ea = calloc(cnt, sizeof(float));
        if (err) memcpy(ea, err, cnt * sizeof(float));
        MP_OK(rank, braid_allreduce(ea, ea, cnt, BRAID_FLOAT32, BRAID_AVG, comm));
        double mx = 0, d = 0;
        for (size_t e = 0; e < cnt; e++) {
            mx = fmax(mx, fabs(sum_avg[p][e]));
            d = fmax(d, fabs((double)acc[p][e] + ea[e] - sum_avg[p][e]));
        }
        MP_CHECK(rank, d <= 1e-4 * (mx + 1) * steps,
                 "param %d: sum of outputs + error differs from the sum of gradients by %.3g", p,
                 d);
        free(ea);
    }
    /* bytes */
    braid_ddp_powersgd_stats_t st;
    MP_OK(rank, braid_ddp_powersgd_stats(&hook, &st));
    size_t wire = 0, dense = 0;
    int ncomp = 0;
    for (int p = 0; p < NP; p++) {
        dense += g_rows[p] * g_cols[p];
        if (compressed(p)) {
            wire += (g_rows[p] + g_cols[p]) * R;
            ncomp++;
        } else {
            wire += g_rows[p] * g_cols[p];
        }
    }
    double ring = 2.0 * (n - 1) / n * 4.0;
    double want = ring * (double)wire * steps, want_dense = ring * (double)dense * steps;
    /* the hook counts each of its 4 all-reduces per step rounded down to a byte */
    MP_CHECK(rank, st.steps == (unsigned long long)steps && st.compressed_params == ncomp,
             "steps %llu, %d compressed", st.steps, st.compressed_params);
    MP_CHECK(rank,
             fabs((double)st.sent_bytes - want) <= 4.0 * steps &&
                 fabs((double)st.dense_bytes - want_dense) <= 4.0 * steps,
             "sent %llu bytes (expected %.0f), dense %llu (expected %.0f)", st.sent_bytes, want,
             st.dense_bytes, want_dense);
    if (rank == 0)
        fprintf(stderr,
                "powersgd n=%d lowrank=%d: worst relative difference %.3g; %zu of %zu floats per "
                "step (ratio %.2f)\n",
                n, lowrank, worst, wire, dense, (double)dense / (double)wire);
    braid_ddp_destroy(ddp);
    braid_ddp_hook_powersgd_free(&hook);
    for (int p = 0; p < NP; p++) {
        free(prm[p]);
        free(g[p]);
        free(acc[p]);
        free(out[p]);
        free(sum_avg[p]);
        for (int q = 0; q < n; q++)
            free(rf.err[q][p]);
        free(rf.q[p]);
    }
    return 0;
}

Test(ddp_powersgd, hook_matches_the_reference_with_error_feedback, .timeout = 180)
{
    int lowrank = 0;
    for (int n = 1; n <= 4; n++)
        cr_assert_eq(mp_run(n, psgd_fn, &lowrank, 60), 0, "n=%d (see stderr)", n);
}

Test(ddp_powersgd, exactly_low_rank_gradient_is_reproduced, .timeout = 120)
{
    int lowrank = 1;
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, psgd_fn, &lowrank, 60), 0, "n=%d (see stderr)", n);
}

Test(ddp_powersgd, bad_options_are_rejected)
{
    braid_ddp_powersgd_options_t o;
    braid_ddp_powersgd_options_init(&o);
    braid_ddp_hook_t h;
    o.rank = 0;
    cr_assert_eq(braid_ddp_hook_powersgd(&h, &o), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_ddp_last_error(), "rank"), "%s", braid_ddp_last_error());
    braid_ddp_powersgd_options_init(&o);
    o.min_compression_rate = 0;
    cr_assert_eq(braid_ddp_hook_powersgd(&h, &o), BRAID_ERR_INVALID_ARG);
    cr_assert_eq(braid_ddp_hook_powersgd(NULL, NULL), BRAID_ERR_INVALID_ARG);
    braid_ddp_powersgd_stats_t st;
    braid_ddp_hook_t other = {0};
    cr_assert_eq(braid_ddp_powersgd_stats(&other, &st), BRAID_ERR_INVALID_ARG);
    cr_assert_null(braid_ddp_powersgd_error(&other, 0));
}
