/* Tests of the float16/bfloat16 conversions (src/reduce): every bit pattern round-trips,
 * narrowing rounds to nearest even at every rounding position (subnormal boundaries included),
 * against the independent reference in tests/common/ref_half.h. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"
#include "ref_half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(half, .timeout = 60);

Test(half, f16_all_patterns_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = braid_half_to_float((uint16_t)h);
        uint32_t fb = f2bits(f);
        if (bits_isnan(BRAID_FLOAT16, h)) {
            uint32_t want = (h & 0x8000u) << 16 | 0x7f800000u | (h & 0x3ffu) << 13;
            cr_assert_eq(fb, want, "half 0x%04x -> 0x%08x, want NaN 0x%08x", h, fb, want);
        } else {
            double ref = ref_h2d((uint16_t)h);
            cr_assert((double)f == ref && !!signbit(f) == !!signbit(ref),
                      "half 0x%04x -> %a, want %a", h, (double)f, ref);
        }
        uint16_t back = braid_float_to_half(f);
        cr_assert_eq(back, h, "half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

Test(half, bf16_all_patterns_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = braid_bf16_to_float((uint16_t)h);
        uint32_t fb = f2bits(f);
        cr_assert_eq(fb, h << 16, "bf16 0x%04x -> 0x%08x", h, fb);
        if (!bits_isnan(BRAID_BFLOAT16, h)) {
            double ref = ref_bf2d((uint16_t)h);
            cr_assert((double)f == ref && !!signbit(f) == !!signbit(ref),
                      "bf16 0x%04x -> %a, want %a", h, (double)f, ref);
        }
        cr_assert_eq(braid_float_to_bf16(f), h, "bf16 0x%04x does not round-trip", h);
    }
}

/* float -> narrow: for every float exponent, every kept-bit pattern at the rounding position
 * (which moves in float16's subnormal range) with the dropped bits at 0, 1, just below the
 * tie, the tie, just above, all ones and random; both signs. NaNs keep their top payload. */
static void check_narrowing(int bf)
{
    uint64_t rnd = 12345;
    for (uint32_t e = 0; e < 256; e++) {
        int s; /* bits of the float's significand (with implicit bit) dropped by the rounding */
        if (bf)
            s = 16;
        else if (e >= 113)
            s = 13;
        else
            s = e < 101 ? 24 : 126 - (int)e; /* shift of m | 0x800000 (24 drops everything) */
        int kept = 23 - s > 0 ? 23 - s : 0;  /* significand field bits above the position */
        uint32_t tie = 1u << (s - 1), lomask = (1u << s) - 1;
        for (uint32_t hi = 0; hi < (1u << kept); hi++) {
            rnd = mix64(rnd);
            uint32_t los[] = {0, 1, tie - 1, tie, tie + 1, lomask, (uint32_t)rnd & lomask};
            for (size_t l = 0; l < sizeof(los) / sizeof(los[0]); l++)
                for (uint32_t sign = 0; sign < 2; sign++) {
                    uint32_t m = ((hi << s) | los[l]) & 0x7fffffu;
                    uint32_t fb = sign << 31 | e << 23 | m;
                    float f = bits2f(fb);
                    uint16_t got = bf ? braid_float_to_bf16(f) : braid_float_to_half(f);
                    uint16_t want;
                    if (isnan(f)) {
                        uint32_t top = bf ? (m >> 16) : (m >> 13);
                        uint32_t q = bf ? 0x40 : 0x200;
                        want = (uint16_t)((sign << 15) | (bf ? 0x7f80u : 0x7c00u) | top |
                                          (top == 0 ? q : 0));
                    } else {
                        want = bf ? ref_d2bf(f) : ref_d2h(f);
                    }
                    cr_assert_eq(got, want, "%s(%a = 0x%08x) = 0x%04x, want 0x%04x",
                                 bf ? "bf16" : "half", (double)f, fb, got, want);
                }
        }
    }
    for (int i = 0; i < 1000000; i++) { /* and random patterns */
        rnd = mix64(rnd);
        float f = bits2f((uint32_t)rnd);
        if (isnan(f)) continue;
        uint16_t got = bf ? braid_float_to_bf16(f) : braid_float_to_half(f);
        uint16_t want = bf ? ref_d2bf(f) : ref_d2h(f);
        cr_assert_eq(got, want, "0x%08x -> 0x%04x want 0x%04x", (uint32_t)rnd, got, want);
    }
}

Test(half, f16_from_float_rounding)
{
    check_narrowing(0);
}

Test(half, bf16_from_float_rounding)
{
    check_narrowing(1);
}

Test(half, known_values)
{
    struct {
        float f;
        uint16_t h, bf;
    } k[] = {
        {1.0f, 0x3c00, 0x3f80},
        {-2.0f, 0xc000, 0xc000},
        {65504.0f, 0x7bff, 0x4780},
        {65519.996f, 0x7bff, 0x4780},
        {65520.0f, 0x7c00, 0x4780},        /* tie: even is inf for half */
        {0x1p-24f, 0x0001, 0x3380},        /* smallest half subnormal */
        {0x1p-25f, 0x0000, 0x3300},        /* tie between 0 and 2^-24: even is 0 */
        {0x1.000002p-25f, 0x0001, 0x3300}, /* just above the tie */
        {0x1.8p-24f, 0x0002, 0x33c0},      /* 1.5 units: tie, even is 2 */
        {0x1p-14f, 0x0400, 0x3880},        /* smallest half normal */
        {0x1.ffcp-15f, 0x0400, 0x3880},    /* 1023.5 units: up into the normals */
        {1.0f + 0x1p-11f, 0x3c00, 0x3f80}, /* tie to even (down) */
        {1.0f + 0x3p-11f, 0x3c02, 0x3f80}, /* tie to even (up) */
        {1.0f + 0x1p-8f, 0x3c04, 0x3f80},  /* bf16 tie, even is down */
        {1.0f + 0x3p-8f, 0x3c0c, 0x3f82},  /* bf16 tie, even is up */
        {-0.0f, 0x8000, 0x8000},
        {INFINITY, 0x7c00, 0x7f80},
        {-INFINITY, 0xfc00, 0xff80},
        {0x1.fffffep127f, 0x7c00, 0x7f80},  /* float max: bf16 rounds to inf */
        {0x1p-149f, 0x0000, 0x0000},        /* float subnormals */
        {0x1.fffffcp-127f, 0x0000, 0x0080}, /* bf16 rounds up to its smallest normal */
    };
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        cr_assert_eq(braid_float_to_half(k[i].f), k[i].h, "half(%a) = 0x%04x, want 0x%04x",
                     (double)k[i].f, braid_float_to_half(k[i].f), k[i].h);
        cr_assert_eq(braid_float_to_bf16(k[i].f), k[i].bf, "bf16(%a) = 0x%04x, want 0x%04x",
                     (double)k[i].f, braid_float_to_bf16(k[i].f), k[i].bf);
    }
    /* NaNs: quiet stays quiet with its top payload; a payload lost by narrowing becomes quiet;
     * a signaling NaN whose payload survives stays signaling (exact round trips). */
    cr_assert_eq(braid_float_to_half(bits2f(0x7fc00000u)), 0x7e00);
    cr_assert_eq(braid_float_to_half(bits2f(0xffc02000u)), 0xfe01);
    cr_assert_eq(braid_float_to_half(bits2f(0x7f800001u)), 0x7e00);
    cr_assert_eq(braid_float_to_half(bits2f(0x7fa00000u)), 0x7d00);
    cr_assert_eq(braid_float_to_bf16(bits2f(0x7fc00000u)), 0x7fc0);
    cr_assert_eq(braid_float_to_bf16(bits2f(0x7f800001u)), 0x7fc0);
    cr_assert_eq(braid_float_to_bf16(bits2f(0xffa10000u)), 0xffa1);
    cr_assert_eq(f2bits(braid_half_to_float(0x7e00)), 0x7fc00000u);
    cr_assert_eq(f2bits(braid_half_to_float(0x0001)), 0x33800000u);
    cr_assert_eq(f2bits(braid_half_to_float(0x8000)), 0x80000000u);
    cr_assert_eq(f2bits(braid_half_to_float(0x03ff)), f2bits(0x1.ff8p-15f));
}
