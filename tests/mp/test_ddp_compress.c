/* Suite `ddp_compress`: the float16/bfloat16 compression hooks of the DDP layer. The casts
 * against the independent reference of tests/common/ref_half.h (frexp/ldexp/rint), and the
 * hook on real ranks: exact where the values and their sums are exact in the narrow type,
 * within the narrow type's rounding bound otherwise, and every result representable in the
 * narrow type (so the wire really carried it). */
#include "braid/ddp.h"
#include "mp.h"
#include "ref_half.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

Test(ddp_compress, casts_match_the_reference_rounding)
{
    static const braid_datatype_t wires[2] = {BRAID_FLOAT16, BRAID_BFLOAT16};
    const size_t n = 1 << 20;
    float *f = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    uint16_t *h = malloc(n * sizeof(uint16_t));
    /* random bit patterns, plus values around float16's edges and ties */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)mix64(i);
        if (i % 4 == 1) u = 0x33000000u + (uint32_t)(mix64(i) % 0x14800000u); /* 2^-25 .. 2^16 */
        if (i % 4 == 2) u = (u & 0x80000000u) | 0x38000000u | (u & 0x07ffe000u) | 0x1000u;
        memcpy(&f[i], &u, 4);
    }
    const float edges[] = {0.0f,     -0.0f,    65504.0f,   65519.99f, 65520.0f,
                           0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f,  0x1.ffcp-15f,
                           3.0e38f,  INFINITY, -INFINITY};
    memcpy(f, edges, sizeof(edges));
    for (int w = 0; w < 2; w++) {
        cr_assert_eq(braid_ddp_cast(f, BRAID_FLOAT32, h, wires[w], n), BRAID_SUCCESS);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            if (isnan(f[i])) {
                cr_assert(w == 0 ? ((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff))
                                 : ((h[i] & 0x7f80) == 0x7f80 && (h[i] & 0x7f)),
                          "NaN not kept: %04x", h[i]);
                continue;
            }
            uint16_t want = w == 0 ? ref_d2h((double)f[i]) : ref_d2bf((double)f[i]);
            if (h[i] != want && bad++ < 5)
                cr_log_error("%s: %a -> %04x, reference %04x", braid_dtype_name(wires[w]),
                             (double)f[i], h[i], want);
        }
        cr_assert_eq(bad, 0, "%zu roundings differ from the reference", bad);
        /* back: every non-NaN 16-bit pattern exactly */
        for (uint32_t v = 0; v < 65536; v++)
            h[v] = (uint16_t)v;
        cr_assert_eq(braid_ddp_cast(h, wires[w], back, BRAID_FLOAT32, 65536), BRAID_SUCCESS);
        for (uint32_t v = 0; v < 65536; v++) {
            double want = w == 0 ? ref_h2d((uint16_t)v) : ref_bf2d((uint16_t)v);
            if (isnan(want))
                cr_assert(isnan(back[v]), "%04x", v);
            else
                cr_assert((double)back[v] == want && !signbit(back[v]) == !signbit(want),
                          "%s %04x -> %a, reference %a", braid_dtype_name(wires[w]), v,
                          (double)back[v], want);
        }
    }
    cr_assert_eq(braid_ddp_cast(f, BRAID_FLOAT64, h, BRAID_FLOAT16, 4), BRAID_ERR_UNSUPPORTED);
    braid_ddp_hook_t hk;
    cr_assert_eq(braid_ddp_hook_compress(&hk, BRAID_FLOAT32), BRAID_ERR_INVALID_ARG);
    free(f);
    free(back);
    free(h);
}

#define NP 5

/* Exact part: gradients k/8 with |k| <= 8 (exact in both types, and so are their sums). */
static float exact_val(int rank, int p, size_t e)
{
    return (float)((int)((rank * 7 + (int)e * 3 + p * 5) % 17) - 8) / 8.0f;
}

/* Inexact part: arbitrary values. */
static float rough_val(int rank, int p, size_t e)
{
    return (float)(sin(0.1 * (double)e + p) * (1.0 + rank) * 0.37 + 1e-3 * rank);
}

static int compress_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    braid_datatype_t wire = *(const braid_datatype_t *)arg;
    const size_t counts[NP] = {1000, 1, 333, 4097, 64};
    float *p[NP], *g[NP];
    braid_ddp_param_t ps[NP];
    for (int i = 0; i < NP; i++) {
        p[i] = calloc(counts[i], sizeof(float));
        g[i] = calloc(counts[i], sizeof(float));
        ps[i] = (braid_ddp_param_t){p[i], g[i], counts[i], BRAID_FLOAT32, NULL, 0};
    }
    braid_ddp_hook_t hook;
    MP_OK(rank, braid_ddp_hook_compress(&hook, wire));
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    o.op = BRAID_SUM;
    o.first_bucket_bytes = 2048;
    o.bucket_cap_bytes = 8192;
    o.hook = &hook;
    braid_ddp_t ddp;
    braid_result_t r = braid_ddp_create(&ddp, comm, ps, NP, &o);
    MP_CHECK(rank, r == BRAID_SUCCESS, "create: %s", braid_ddp_last_error());
    MP_CHECK(rank, braid_ddp_num_buckets(ddp) >= 3, "%d buckets", braid_ddp_num_buckets(ddp));
    const double u = wire == BRAID_FLOAT16 ? 0x1p-11 : 0x1p-8; /* unit roundoff */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < NP; i++)
            for (size_t e = 0; e < counts[i]; e++)
                g[i][e] = pass == 0 ? exact_val(rank, i, e) : rough_val(rank, i, e);
        for (int i = NP - 1; i >= 0; i--) {
            r = braid_ddp_grad_ready(ddp, i);
            MP_CHECK(rank, r == BRAID_SUCCESS, "grad_ready: %s", braid_ddp_last_error());
        }
        r = braid_ddp_finish(ddp);
        MP_CHECK(rank, r == BRAID_SUCCESS, "finish: %s", braid_ddp_last_error());
        for (int i = 0; i < NP; i++)
            for (size_t e = 0; e < counts[i]; e++) {
                double want = 0, mag = 0;
                for (int q = 0; q < n; q++) {
                    double v = pass == 0 ? exact_val(q, i, e) : rough_val(q, i, e);
                    want += v;
                    mag += fabs(v);
                }
                double got = g[i][e];
                if (pass == 0)
                    MP_CHECK(rank, got == want, "exact pass: param %d[%zu] = %a, expected %a", i, e,
                             got, want);
                else
                    MP_CHECK(rank, fabs(got - want) <= 2.0 * n * u * mag,
                             "param %d[%zu] = %.9g, exact %.9g (bound %.3g)", i, e, got, want,
                             2.0 * n * u * mag);
                uint16_t h;
                float back;
                braid_ddp_cast(&g[i][e], BRAID_FLOAT32, &h, wire, 1);
                braid_ddp_cast(&h, wire, &back, BRAID_FLOAT32, 1);
                MP_CHECK(rank, back == g[i][e], "param %d[%zu] = %a is not a %s value", i, e, got,
                         braid_dtype_name(wire));
            }
    }
    braid_ddp_destroy(ddp);
    braid_ddp_hook_compress_free(&hook);
    for (int i = 0; i < NP; i++) {
        free(p[i]);
        free(g[i]);
    }
    return 0;
}

Test(ddp_compress, float16_and_bfloat16_hooks_reduce_in_the_narrow_type, .timeout = 120)
{
    braid_datatype_t w = BRAID_FLOAT16;
    cr_assert_eq(mp_run(3, compress_fn, &w, 60), 0, "float16 hook, n=3 (see stderr)");
    cr_assert_eq(mp_run(2, compress_fn, &w, 60), 0, "float16 hook, n=2 (see stderr)");
    w = BRAID_BFLOAT16;
    cr_assert_eq(mp_run(4, compress_fn, &w, 60), 0, "bfloat16 hook, n=4 (see stderr)");
}

/* AVG: gradients near +-30000 on 4 ranks. Their average fits float16 (max 65504) but their
 * sum does not: the hook must divide by n in float32 before the cast and sum in the narrow
 * type (as torch's fp16_compress_hook), not sum in it and divide at the end (every ring step
 * rounds its partial sum to float16, infinity past 65504). The exact part (small integers,
 * n a power of 2) must be exact, the large part within the rounding bound of n sums of
 * float16 values, never infinite; on the ring (forced) and on braid's choice. */
static float big_val(int rank, size_t e)
{
    float v = 30000.0f + (float)((rank * 7 + (int)e * 3) % 16) * 64.0f;
    return e % 3 == 1 ? -v : v;
}

typedef struct {
    braid_datatype_t wire;
    const char *algo; /* BRAID_ALGO of the layer's communicator ("" = braid's choice) */
} avg_case_t;

static int compress_avg_fn(braid_comm_t world, int rank, int n, void *arg)
{
    const avg_case_t *c = arg;
    braid_datatype_t wire = c->wire;
    braid_comm_t comm = mp_fake_host_comm(world, rank, 0, c->algo);
    MP_CHECK(rank, comm != NULL, "no communicator");
    enum { N = 777 };
    static float p[N], g[N];
    braid_ddp_param_t ps = {p, g, N, BRAID_FLOAT32, NULL, 0};
    braid_ddp_hook_t hook;
    MP_OK(rank, braid_ddp_hook_compress(&hook, wire));
    braid_ddp_options_t o;
    braid_ddp_options_init(&o);
    MP_CHECK(rank, o.op == BRAID_AVG, "default op %d", (int)o.op);
    o.hook = &hook;
    braid_ddp_t ddp;
    braid_result_t r = braid_ddp_create(&ddp, comm, &ps, 1, &o);
    MP_CHECK(rank, r == BRAID_SUCCESS, "create: %s", braid_ddp_last_error());
    const double u = wire == BRAID_FLOAT16 ? 0x1p-11 : 0x1p-8;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t e = 0; e < N; e++)
            g[e] = pass == 0 ? (float)((rank * 5 + (int)e) % 13 - 6) : big_val(rank, e);
        MP_OK(rank, braid_ddp_grad_ready(ddp, 0));
        r = braid_ddp_finish(ddp);
        MP_CHECK(rank, r == BRAID_SUCCESS, "finish: %s", braid_ddp_last_error());
        for (size_t e = 0; e < N; e++) {
            double want = 0, mag = 0;
            for (int q = 0; q < n; q++) {
                double v = pass == 0 ? (double)((q * 5 + (int)e) % 13 - 6) : big_val(q, e);
                want += v / n;
                mag += fabs(v) / n;
            }
            double got = g[e];
            MP_CHECK(rank, isfinite(got), "%s: pass %d: [%zu] = %g, the average is %g", c->algo,
                     pass, e, got, want);
            if (pass == 0)
                MP_CHECK(rank, got == want, "%s: exact pass: [%zu] = %a, expected %a", c->algo, e,
                         got, want);
            else
                MP_CHECK(rank, fabs(got - want) <= 2.0 * n * u * mag,
                         "%s: [%zu] = %.9g, average %.9g (bound %.3g)", c->algo, e, got, want,
                         2.0 * n * u * mag);
        }
    }
    braid_ddp_destroy(ddp);
    braid_ddp_hook_compress_free(&hook);
    MP_OK(rank, braid_comm_destroy(comm));
    return 0;
}

Test(ddp_compress, avg_divides_before_the_cast_so_a_large_sum_does_not_overflow, .timeout = 120)
{
    /* the ring rounds every partial sum (3 steps at n = 4); braid's own choice on one host */
    static const char *algos[] = {"ring", ""};
    for (int a = 0; a < 2; a++) {
        avg_case_t c = {BRAID_FLOAT16, algos[a]};
        cr_assert_eq(mp_run(4, compress_avg_fn, &c, 60), 0,
                     "float16 hook, AVG, n=4, algo '%s' (see stderr)", c.algo);
        c.wire = BRAID_BFLOAT16;
        cr_assert_eq(mp_run(4, compress_avg_fn, &c, 60), 0,
                     "bfloat16 hook, AVG, n=4, algo '%s' (see stderr)", c.algo);
    }
}
