/* Reference float16/bfloat16 conversions and bit helpers for the reduction tests, written
 * independently of src/reduce (frexp/ldexp/rint instead of bit manipulation). Shared by
 * tests/unit/test_reduce.c and tests/unit/test_half.c. */
#ifndef BRAID_TEST_REF_HALF_H
#define BRAID_TEST_REF_HALF_H

#include "braid/braid.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- reference float16 / bfloat16 (frexp/ldexp/rint, no bit tricks) --------------------- */

static inline double ref_h2d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * ldexp(m, -24);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * ldexp(1024 + m, e - 25);
}

static inline double ref_bf2d(uint16_t b)
{
    int e = (b >> 7) & 255, m = b & 127;
    double s = (b & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * ldexp(m, -133);
    if (e == 255) return m ? NAN : s * INFINITY;
    return s * ldexp(128 + m, e - 134);
}

/* Rounds a non-NaN double to nearest-even float16 / bfloat16 (rint: default rounding mode). */
static inline uint16_t ref_d2h(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a >= 65520.0) return sign | 0x7c00; /* incl. inf; 65520 is the tie to even (inf) */
    if (a < 0x1p-14) return sign | (uint16_t)rint(a * 0x1p24); /* 1024 is the smallest normal */
    int e;
    double q = rint(ldexp(frexp(a, &e), 11)); /* [1024, 2048] */
    int E = e - 1;
    if (q == 2048.0) {
        q = 1024.0;
        E++;
    }
    return sign | (uint16_t)(((E + 15) << 10) | ((int)q - 1024));
}

static inline uint16_t ref_d2bf(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a >= 0x1.ffp127) return sign | 0x7f80; /* halfway from the max (0x1.fep127) to 2^128 */
    if (a < 0x1p-126) return sign | (uint16_t)rint(a * 0x1p133);
    int e;
    double q = rint(ldexp(frexp(a, &e), 8)); /* [128, 256] */
    int E = e - 1;
    if (q == 256.0) {
        q = 128.0;
        E++;
    }
    return sign | (uint16_t)(((E + 127) << 7) | ((int)q - 128));
}

static inline uint32_t f2bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint64_t d2bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

static inline double bits2d(uint64_t u)
{
    double f;
    memcpy(&f, &u, 8);
    return f;
}

/* Whether bits b are a NaN of float type dt. */
static inline int bits_isnan(braid_datatype_t dt, uint64_t b)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
    case BRAID_BFLOAT16:
        return (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    case BRAID_FLOAT32:
        return (b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu);
    case BRAID_FLOAT64:
        return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (b & 0xfffffffffffffull);
    case BRAID_FLOAT8_E4M3:
        return (b & 0x7f) == 0x7f;
    case BRAID_FLOAT8_E5M2:
        return (b & 0x7c) == 0x7c && (b & 3);
    default:
        return 0;
    }
}

#endif
