/* Tests of the float8 conversions (src/reduce): all 256 codes of e4m3 and e5m2 widen exactly
 * and round-trip; narrowing rounds to nearest even at every rounding position and saturates
 * (CUDA's __NV_SATFINITE, as NCCL uses), checked against the independent reference in
 * tests/common/ref_fp8.h on every midpoint between neighbouring codes, its float32 neighbours,
 * and a sweep over float32 bit patterns; then a few reductions by hand. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"
#include "ref_fp8.h"
#include "ref_half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

TestSuite(fp8, .timeout = 60);

typedef struct {
    const char *name;
    braid_datatype_t dt;
    float (*widen)(uint8_t);
    uint8_t (*narrow)(float);
    double (*ref_widen)(uint8_t);
    uint8_t (*ref_narrow)(double);
} fmt_t;

static const fmt_t fmts[2] = {
    {"e4m3", BRAID_FLOAT8_E4M3, braid_e4m3_to_float, braid_float_to_e4m3, ref_e4m3_to_d,
     ref_d_to_e4m3},
    {"e5m2", BRAID_FLOAT8_E5M2, braid_e5m2_to_float, braid_float_to_e5m2, ref_e5m2_to_d,
     ref_d_to_e5m2},
};

/* The float32 bits braid gives for a NaN code: e4m3's one NaN is quiet; e5m2 keeps sign and
 * payload (the top byte of a float16). */
static uint32_t nan_bits(const fmt_t *f, uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    if (f->dt == BRAID_FLOAT8_E4M3) return sign | 0x7fc00000u;
    return sign | 0x7f800000u | (uint32_t)(b & 3) << 21;
}

Test(fp8, all_codes_widen_exactly_and_round_trip)
{
    for (int k = 0; k < 2; k++) {
        const fmt_t *f = &fmts[k];
        int nans = 0;
        for (uint32_t b = 0; b < 256; b++) {
            float v = f->widen((uint8_t)b);
            if (bits_isnan(f->dt, b)) {
                nans++;
                cr_assert_eq(f2bits(v), nan_bits(f, (uint8_t)b), "%s 0x%02x -> 0x%08x", f->name, b,
                             f2bits(v));
            } else {
                double ref = f->ref_widen((uint8_t)b);
                cr_assert((double)v == ref && !!signbit(v) == !!signbit(ref),
                          "%s 0x%02x -> %a, want %a", f->name, b, (double)v, ref);
            }
            uint8_t back = f->narrow(v);
            if (f->dt == BRAID_FLOAT8_E5M2 && (b & 0x7f) == 0x7c) /* inf saturates */
                cr_assert_eq(back, (b & 0x80) | 0x7b, "%s 0x%02x (inf) -> 0x%02x", f->name, b,
                             back);
            else
                cr_assert_eq(back, b, "%s 0x%02x -> %a -> 0x%02x", f->name, b, (double)v, back);
        }
        cr_assert_eq(nans, f->dt == BRAID_FLOAT8_E4M3 ? 2 : 6, "%s NaN codes", f->name);
    }
    /* Named values: the formats' limits. */
    cr_assert(braid_e4m3_to_float(0x7e) == 448.0f && braid_e4m3_to_float(0x01) == 0x1p-9f);
    cr_assert(braid_e4m3_to_float(0x08) == 0x1p-6f && braid_e4m3_to_float(0x38) == 1.0f);
    cr_assert(braid_e5m2_to_float(0x7b) == 57344.0f && braid_e5m2_to_float(0x01) == 0x1p-16f);
    cr_assert(braid_e5m2_to_float(0x3c) == 1.0f && isinf(braid_e5m2_to_float(0xfc)));
}

static void check_narrow(const fmt_t *f, float x)
{
    uint8_t got = f->narrow(x);
    if (isnan(x)) {
        cr_assert(bits_isnan(f->dt, got) && (got & 0x80) == (signbit(x) ? 0x80 : 0),
                  "%s(NaN 0x%08x) = 0x%02x", f->name, f2bits(x), got);
        return;
    }
    uint8_t want = f->ref_narrow((double)x);
    cr_assert_eq(got, want, "%s(%a = 0x%08x) = 0x%02x, want 0x%02x", f->name, (double)x, f2bits(x),
                 got, want);
}

/* Every rounding position: each code, the midpoint to the next code (a tie), one float32 ulp
 * either side of it, and the same below the smallest subnormal and above the largest value. */
Test(fp8, narrowing_rounds_to_nearest_even_at_every_midpoint)
{
    for (int k = 0; k < 2; k++) {
        const fmt_t *f = &fmts[k];
        for (uint32_t b = 0; b < 0x80; b++) {
            if (bits_isnan(f->dt, b)) continue;
            double lo = f->ref_widen((uint8_t)b);
            double hi = bits_isnan(f->dt, b + 1) || isinf(f->ref_widen((uint8_t)(b + 1)))
                            ? lo * 2 /* past the max: beyond saturation */
                            : f->ref_widen((uint8_t)(b + 1));
            double mid = (lo + hi) / 2;
            float pts[] = {(float)lo,
                           (float)mid,
                           nextafterf((float)mid, 0.0f),
                           nextafterf((float)mid, INFINITY),
                           nextafterf((float)lo, INFINITY),
                           nextafterf((float)lo, 0.0f)};
            for (size_t i = 0; i < sizeof(pts) / sizeof(pts[0]); i++) {
                check_narrow(f, pts[i]);
                check_narrow(f, -pts[i]);
            }
        }
        /* Ties to even by name. */
        if (f->dt == BRAID_FLOAT8_E4M3) {
            cr_assert_eq(f->narrow(1.0625f), 0x38);   /* 1 + 1/16: tie, stays at 1.0 (even) */
            cr_assert_eq(f->narrow(1.1875f), 0x3a);   /* tie between 1.125 and 1.25 -> 1.25 */
            cr_assert_eq(f->narrow(0x1p-10f), 0x00);  /* half the smallest subnormal: to 0 */
            cr_assert_eq(f->narrow(0x3p-10f), 0x02);  /* 1.5 units: to 2 (even) */
            cr_assert_eq(f->narrow(464.0f), 0x7e);    /* tie with 480 (not a value): 448 */
            cr_assert_eq(f->narrow(1e30f), 0x7e);     /* saturates */
            cr_assert_eq(f->narrow(-INFINITY), 0xfe); /* saturates, NCCL's SATFINITE */
            cr_assert_eq(f->narrow(NAN) & 0x7f, 0x7f);
        } else {
            cr_assert_eq(f->narrow(1.125f), 0x3c);   /* tie: stays at 1.0 */
            cr_assert_eq(f->narrow(1.375f), 0x3e);   /* tie between 1.25 and 1.5 -> 1.5 */
            cr_assert_eq(f->narrow(61440.0f), 0x7b); /* tie with 65536 (inf): saturates */
            cr_assert_eq(f->narrow(INFINITY), 0x7b); /* saturates */
            cr_assert_eq(f->narrow(-0.0f), 0x80);
            cr_assert_eq(f->narrow(bits2f(0x7fc00000u)), 0x7e); /* quiet NaN */
            cr_assert_eq(f->narrow(bits2f(0xffa00000u)), 0xfd); /* signaling keeps payload */
            cr_assert_eq(f->narrow(bits2f(0x7f800001u)), 0x7e); /* payload below: quiet */
        }
    }
}

/* A sweep over float32 bit patterns (every 257th, both signs, and NaNs among them). */
Test(fp8, narrowing_matches_the_reference_over_float32, .timeout = 120)
{
    for (int k = 0; k < 2; k++)
        for (uint64_t u = 0; u <= 0xffffffffull; u += 257)
            check_narrow(&fmts[k], bits2f((uint32_t)u));
}

/* Reductions by hand: saturation, NaN, signed zeros, float32 accumulation. */
Test(fp8, reductions_saturate_and_round_once)
{
    uint8_t a[8], b[8], r[8];
    /* e4m3: 448 + 448 saturates; 240 + 16 = 256 exact; 1 + 1/16 (tie) -> 1; NaN wins. */
    const float ea[] = {448, 240, 1, 0.5f, -448, 0, 2, 3};
    const float eb[] = {448, 16, 0.0625f, 0.5f, -32, -0.0f, 0, 0};
    for (int i = 0; i < 8; i++) {
        a[i] = braid_float_to_e4m3(ea[i]);
        b[i] = braid_float_to_e4m3(eb[i]);
    }
    a[6] = 0xff; /* NaN */
    braid_reduce_pair(BRAID_FLOAT8_E4M3, BRAID_SUM, r, a, b, 8);
    cr_assert(r[0] == 0x7e && braid_e4m3_to_float(r[1]) == 256.0f && r[2] == 0x38, "%x %x %x", r[0],
              r[1], r[2]);
    cr_assert(braid_e4m3_to_float(r[3]) == 1.0f && r[4] == 0xfe && r[5] == 0x00 && r[6] == 0xff);
    braid_reduce_pair(BRAID_FLOAT8_E4M3, BRAID_PROD, r, a, b, 8);
    cr_assert(r[0] == 0x7e && r[4] == 0x7e && r[5] == 0x80, "prod %x %x %x", r[0], r[4], r[5]);
    braid_reduce_pair(BRAID_FLOAT8_E4M3, BRAID_MIN, r, a, b, 8);
    cr_assert(r[5] == 0x80 && braid_e4m3_to_float(r[4]) == -448.0f && r[6] == 0xff);
    /* avg over 3 ranks of (448 + 448): the sum saturates only after the division (float32). */
    braid_reduce_pair_final(BRAID_FLOAT8_E4M3, BRAID_AVG, r, a, b, 1, 3);
    cr_assert_eq(r[0], braid_float_to_e4m3(896.0f / 3.0f));

    /* e5m2: an inf input saturates in every arithmetic result, also in min/max (as NCCL). */
    uint8_t c[4] = {0x7c, 0x7b, 0x3c, 0xfc}, d[4] = {0x3c, 0x7b, 0x3c, 0x7c};
    braid_reduce_pair(BRAID_FLOAT8_E5M2, BRAID_SUM, r, c, d, 4);
    cr_assert(r[0] == 0x7b && r[1] == 0x7b && braid_e5m2_to_float(r[2]) == 2.0f, "%x %x", r[0],
              r[1]);
    cr_assert(bits_isnan(BRAID_FLOAT8_E5M2, r[3]), "-inf + inf = NaN, got 0x%02x", r[3]);
    braid_reduce_pair(BRAID_FLOAT8_E5M2, BRAID_MAX, r, c, d, 4);
    cr_assert(r[0] == 0x7b && r[3] == 0x7b, "max %x %x", r[0], r[3]);
    /* float32 accumulation: 57344 + 2^-16 rounds in float32 first, then to 57344. */
    uint8_t big = 0x7b, tiny = 0x01;
    braid_reduce_pair(BRAID_FLOAT8_E5M2, BRAID_SUM, r, &big, &tiny, 1);
    cr_assert_eq(r[0], 0x7b);
}
