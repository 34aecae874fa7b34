/* Reference float8 (OCP FP8 e4m3 "fn" and e5m2) conversions for the reduction tests, written
 * independently of src/reduce (frexp/ldexp/rint, no bit tricks). Narrowing rounds to nearest
 * even and saturates as CUDA's __NV_SATFINITE conversions do (what braid implements): every
 * magnitude at or above the largest finite value, infinity included, gives that value. */
#ifndef BRAID_TEST_REF_FP8_H
#define BRAID_TEST_REF_FP8_H

#include <math.h>
#include <stdint.h>

#define REF_E4M3_MAX 448.0
#define REF_E5M2_MAX 57344.0

static inline double ref_e4m3_to_d(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    double s = (b & 0x80) ? -1.0 : 1.0;
    if ((b & 0x7f) == 0x7f) return NAN;
    if (e == 0) return s * ldexp(m, -9);
    return s * ldexp(8 + m, e - 10);
}

static inline double ref_e5m2_to_d(uint8_t b)
{
    int e = (b >> 2) & 31, m = b & 3;
    double s = (b & 0x80) ? -1.0 : 1.0;
    if (e == 0) return s * ldexp(m, -16);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * ldexp(4 + m, e - 17);
}

/* A non-NaN double to e4m3: 3 mantissa bits, exponent bias 7, min normal 2^-6. */
static inline uint8_t ref_d_to_e4m3(double v)
{
    uint8_t sign = signbit(v) ? 0x80 : 0;
    double a = fabs(v);
    if (a >= REF_E4M3_MAX) return sign | 0x7e;
    if (a < 0x1p-6) return sign | (uint8_t)rint(a * 0x1p9); /* 8 is the smallest normal */
    int e = 0; /* frexp sets it (gcc -O3's -Wmaybe-uninitialized does not see that) */
    double q = rint(ldexp(frexp(a, &e), 4)); /* [8, 16] */
    int E = e - 1;
    if (q == 16.0) {
        q = 8.0;
        E++;
    }
    return sign | (uint8_t)(((E + 7) << 3) | ((int)q - 8));
}

/* A non-NaN double to e5m2: 2 mantissa bits, bias 15, min normal 2^-14. */
static inline uint8_t ref_d_to_e5m2(double v)
{
    uint8_t sign = signbit(v) ? 0x80 : 0;
    double a = fabs(v);
    if (a >= REF_E5M2_MAX) return sign | 0x7b;
    if (a < 0x1p-14) return sign | (uint8_t)rint(a * 0x1p16);
    int e = 0; /* frexp sets it (gcc -O3's -Wmaybe-uninitialized does not see that) */
    double q = rint(ldexp(frexp(a, &e), 3)); /* [4, 8] */
    int E = e - 1;
    if (q == 8.0) {
        q = 4.0;
        E++;
    }
    return sign | (uint8_t)(((E + 15) << 2) | ((int)q - 4));
}

#endif
