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
 *    (rows + cols) * r + the raw counts), against (rows * cols) for the default all-reduce.
 * 5. Overlap (overlap_*): the Q all-reduce of bucket b is started when bucket b + 1 is launched,
 *    and its result (P Q^T, the error) applied as soon as it is seen done: after the gradients
 *    of bucket 1 are ready, braid_ddp_poll alone must bring bucket 0 to done before finish,
 *    with its final gradients already in place; ranks observe completions at different times
 *    (rank-dependent pauses) without the collectives' order differing; and the results are
 *    bit-identical, step after step (error feedback and warm start carried), to a second layer
 *    whose gradients are all readied at the end (nothing overlapped). */
#include "braid/ddp.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* registration: X 24x40, v 50, Y 32x48, Z 20x36; buckets (2048 first, then 4096 bytes):
 * {Z}, {Y}, {v, X}; all three matrices compressed at r = 2 */
#define NO 4
static const size_t o_rows[NO] = {24, 1, 32, 20}, o_cols[NO] = {40, 50, 48, 36};

static int overlap_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float *pa[NO], *pb[NO], *gb[NO];
    braid_ddp_param_t psa[NO], psb[NO];
    for (int p = 0; p < NO; p++) {
        size_t cnt = o_rows[p] * o_cols[p];
        pa[p] = calloc(cnt, sizeof(float));
        pb[p] = calloc(cnt, sizeof(float));
        gb[p] = calloc(cnt, sizeof(float));
        psa[p] = (braid_ddp_param_t){pa[p], NULL, cnt, BRAID_FLOAT32, NULL, o_rows[p]};
        psb[p] = (braid_ddp_param_t){pb[p], gb[p], cnt, BRAID_FLOAT32, NULL, o_rows[p]};
    }
    braid_ddp_powersgd_options_t po;
    braid_ddp_powersgd_options_init(&po);
    po.rank = R;
    po.seed = 7;
    braid_ddp_hook_t ha, hb;
    MP_OK(rank, braid_ddp_hook_powersgd(&ha, &po));
    MP_OK(rank, braid_ddp_hook_powersgd(&hb, &po));
    braid_ddp_options_t oa, ob;
    braid_ddp_options_init(&oa);
    oa.first_bucket_bytes = 2048;
    oa.bucket_cap_bytes = 4096;
    ob = oa;
    oa.hook = &ha;
    oa.grad_as_bucket_view = 1;
    ob.hook = &hb;
    braid_ddp_t da, db;
    MP_CHECK(rank, !braid_ddp_create(&da, comm, psa, NO, &oa), "create: %s",
             braid_ddp_last_error());
    MP_CHECK(rank, !braid_ddp_create(&db, comm, psb, NO, &ob), "create: %s",
             braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_num_buckets(da) == 3, "%d buckets", braid_ddp_num_buckets(da));
    MP_CHECK(rank,
             braid_ddp_param_bucket(da, 3, NULL) == 0 && braid_ddp_param_bucket(da, 2, NULL) == 1,
             "bucket layout");
    float *early = calloc(o_rows[3] * o_cols[3], sizeof(float));
    for (int step = 1; step <= 4; step++) {
        for (int p = 0; p < NO; p++) {
            float *g = braid_ddp_grad(da, p);
            for (size_t e = 0; e < o_rows[p] * o_cols[p]; e++)
                g[e] = gb[p][e] =
                    (float)(sin(0.29 * (double)e + 0.9 * p + 0.53 * step) * (1 + 0.3 * rank) +
                            0.02 * cos((double)e * (rank + 1)));
        }
        /* A: bucket 0 (Z), pause, bucket 1 (Y): that launch starts bucket 0's Q all-reduce */
        MP_CHECK(rank, !braid_ddp_grad_ready(da, 3), "ready: %s", braid_ddp_last_error());
        usleep(rank % 2 ? 3000 : 0);
        MP_CHECK(rank, !braid_ddp_grad_ready(da, 2), "ready: %s", braid_ddp_last_error());
        braid_ddp_bucket_info_t in;
        double t0 = proc_now_s();
        do {
            MP_CHECK(rank, !braid_ddp_poll(da), "poll: %s", braid_ddp_last_error());
            MP_OK(rank, braid_ddp_bucket_info(da, 0, &in));
            if (in.t_done == 0) usleep(200);
        } while (in.t_done == 0 && proc_now_s() - t0 < 20);
        MP_CHECK(rank, in.t_done != 0,
                 "step %d: bucket 0 not done 20 s after bucket 1 was launched (its Q all-reduce "
                 "waits for finish?)",
                 step);
        memcpy(early, braid_ddp_grad(da, 3), o_rows[3] * o_cols[3] * sizeof(float));
        usleep(rank % 2 ? 0 : 2000);
        MP_CHECK(rank, !braid_ddp_grad_ready(da, 1), "ready: %s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_grad_ready(da, 0), "ready: %s", braid_ddp_last_error());
        double tf = proc_now_s();
        MP_CHECK(rank, !braid_ddp_finish(da), "finish: %s", braid_ddp_last_error());
        MP_OK(rank, braid_ddp_bucket_info(da, 0, &in));
        MP_CHECK(rank, in.t_done < tf, "step %d: bucket 0 done at %.6f, finish called at %.6f",
                 step, in.t_done, tf);
        MP_CHECK(rank, !memcmp(early, braid_ddp_grad(da, 3), o_rows[3] * o_cols[3] * sizeof(float)),
                 "step %d: bucket 0's gradient changed after it was reported done", step);
        /* B: first-registered first, so no bucket can launch before the last grad_ready,
         * which launches all three (P0, Q0, P1, Q1, P2) back to back */
        for (int p = 0; p < NO; p++)
            MP_CHECK(rank, !braid_ddp_grad_ready(db, p), "ready: %s", braid_ddp_last_error());
        MP_CHECK(rank, !braid_ddp_finish(db), "finish: %s", braid_ddp_last_error());
        for (int p = 0; p < NO; p++) {
            size_t cnt = o_rows[p] * o_cols[p];
            const float *ga = braid_ddp_grad(da, p);
            for (size_t e = 0; e < cnt; e++)
                MP_CHECK(rank, ga[e] == gb[p][e] || (isnan(ga[e]) && isnan(gb[p][e])),
                         "step %d param %d elem %zu: overlapped %.9g, at the end %.9g", step, p, e,
                         ga[e], gb[p][e]);
            const float *ea = braid_ddp_powersgd_error(&ha, p),
                        *eb = braid_ddp_powersgd_error(&hb, p);
            MP_CHECK(rank, (ea == NULL) == (p == 1) && (eb == NULL) == (p == 1),
                     "param %d: error buffers %p %p", p, (const void *)ea, (const void *)eb);
            if (ea)
                MP_CHECK(rank, !memcmp(ea, eb, cnt * sizeof(float)),
                         "step %d param %d: error feedback differs", step, p);
        }
        /* the vector's gradient is the plain average (a check of the data, not only A = B) */
        const float *gv = braid_ddp_grad(da, 1);
        for (size_t e = 0; e < o_cols[1]; e++) {
            double avg = 0;
            for (int q = 0; q < n; q++)
                avg += (float)(sin(0.29 * (double)e + 0.9 + 0.53 * step) * (1 + 0.3 * q) +
                               0.02 * cos((double)e * (q + 1)));
            avg /= n;
            MP_CHECK(rank, fabs(gv[e] - avg) <= 1e-6 * (1 + fabs(avg)),
                     "step %d: v[%zu] = %.9g, average %.9g", step, e, gv[e], avg);
        }
    }
    braid_ddp_powersgd_stats_t sa, sb;
    MP_OK(rank, braid_ddp_powersgd_stats(&ha, &sa));
    MP_OK(rank, braid_ddp_powersgd_stats(&hb, &sb));
    MP_CHECK(rank, sa.sent_bytes == sb.sent_bytes && sa.compressed_params == 3,
             "sent %llu vs %llu, %d compressed", sa.sent_bytes, sb.sent_bytes,
             sa.compressed_params);
    braid_ddp_destroy(da);
    braid_ddp_destroy(db);
    braid_ddp_hook_powersgd_free(&ha);
    braid_ddp_hook_powersgd_free(&hb);
    for (int p = 0; p < NO; p++) {
        free(pa[p]);
        free(pb[p]);
        free(gb[p]);
    }
    free(early);
    return 0;
}

Test(ddp_powersgd, overlap_q_all_reduce_before_finish_same_results, .timeout = 120)
{
    for (int n = 1; n <= 4; n++)
        cr_assert_eq(mp_run(n, overlap_fn, NULL, 60), 0, "n=%d (see stderr)", n);
}

Test(ddp_powersgd, poll_rejects_null)
{
    cr_assert_eq(braid_ddp_poll(NULL), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_ddp_last_error(), "ddp"), "%s", braid_ddp_last_error());
}

/* A matrix whose gradient is zero on every rank in one step (a parameter unused in that step,
 * with find_unused_parameters its gradient is reduced as zeros): P = M Q is zero, so is the new
 * Q = M^T P, and warm start must not keep that Q (every later P = M Q would be zero: the
 * gradient replaced by zeros for good, everything piling up in the error buffer); a column of
 * Q that is (as good as) zero restarts from the initial formula. And a matrix of tiny
 * (subnormal) gradients: normalising P must not overflow (1 / |P| is beyond float's range)
 * into infinities and NaN. On every step after the first the hook's output is finite, not
 * zero, and the same on every rank. */
#define ZR 16
#define ZC 12

static double zero_grad(int rank, int step, size_t e, int tiny)
{
    double v = (double)((int)((e * 7 + (size_t)step * 3 + (size_t)rank * 5) % 11) - 5);
    return tiny ? v * 1e-41 : v;
}

static int psgd_zero_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    const int tiny = *(const int *)arg;
    (void)n;
    static float w[ZR * ZC], g[ZR * ZC];
    braid_ddp_param_t p = {w, g, ZR * ZC, BRAID_FLOAT32, NULL, ZR};
    braid_ddp_hook_t hook;
    braid_ddp_powersgd_options_t po;
    braid_ddp_powersgd_options_init(&po);
    po.rank = 1;
    MP_OK(rank, braid_ddp_hook_powersgd(&hook, &po));
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.hook = &hook;
    o.find_unused_parameters = 1;
    braid_ddp_t d;
    braid_result_t r = braid_ddp_create(&d, comm, &p, 1, &o);
    MP_CHECK(rank, r == BRAID_SUCCESS, "create: %s", braid_ddp_last_error());
    for (int step = 0; step < 4; step++) {
        for (size_t e = 0; e < ZR * ZC; e++)
            g[e] = (float)zero_grad(rank, step, e, tiny);
        /* step 0 without tiny: the parameter is unused (zeros on every rank) */
        if (tiny || step > 0) MP_OK(rank, braid_ddp_grad_ready(d, 0));
        r = braid_ddp_finish(d);
        MP_CHECK(rank, r == BRAID_SUCCESS, "finish: %s", braid_ddp_last_error());
        double n2 = 0;
        for (size_t e = 0; e < ZR * ZC; e++) {
            MP_CHECK(rank, isfinite(g[e]), "step %d: grad[%zu] = %g", step, e, (double)g[e]);
            n2 += (double)g[e] * g[e];
        }
        double lo = n2, hi = n2;
        MP_OK(rank, braid_allreduce(&lo, &lo, 1, BRAID_FLOAT64, BRAID_MIN, comm));
        MP_OK(rank, braid_allreduce(&hi, &hi, 1, BRAID_FLOAT64, BRAID_MAX, comm));
        MP_CHECK(rank, lo == hi, "step %d: |grad|^2 differs across ranks (%g .. %g)", step, lo, hi);
        if (step > 0)
            MP_CHECK(rank, n2 > 0, "step %d: the hook's gradient is all zero (tiny=%d)", step,
                     tiny);
    }
    braid_ddp_destroy(d);
    braid_ddp_hook_powersgd_free(&hook);
    return 0;
}

Test(ddp_powersgd, zero_or_tiny_gradient_does_not_stall_the_approximation, .timeout = 120)
{
    for (int tiny = 0; tiny <= 1; tiny++)
        for (int n = 1; n <= 2; n++)
            cr_assert_eq(mp_run(n, psgd_zero_fn, &tiny, 60), 0, "n=%d tiny=%d (see stderr)", n,
                         tiny);
}
