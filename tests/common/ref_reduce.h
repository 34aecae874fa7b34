/* The reduction tests' independent reference: dtype helpers, element access, the reference
 * element ops (double arithmetic rounded with casts; see tests/unit/test_reduce.c) and the
 * input generator. Shared by tests/unit/test_reduce.c and tests/unit/test_reduce_many.c. */
#ifndef BRAID_TEST_REF_REDUCE_H
#define BRAID_TEST_REF_REDUCE_H

#include "braid/braid.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ref_fp8.h"
#include "ref_half.h"

/* ---- dtype helpers (independent of the library) ------------------------------------------ */

static const braid_datatype_t all_dtypes[] = {
    BRAID_INT8,    BRAID_UINT8,   BRAID_INT32,       BRAID_UINT32,
    BRAID_INT64,   BRAID_UINT64,  BRAID_FLOAT16,     BRAID_BFLOAT16,
    BRAID_FLOAT32, BRAID_FLOAT64, BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2,
};
#define NDTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))
static const braid_redop_t all_ops[] = {BRAID_SUM, BRAID_PROD, BRAID_MIN, BRAID_MAX, BRAID_AVG};
#define NOPS (sizeof(all_ops) / sizeof(all_ops[0]))

static inline size_t esize(braid_datatype_t dt)
{
    switch (dt) {
    case BRAID_INT8:
    case BRAID_UINT8:
    case BRAID_FLOAT8_E4M3:
    case BRAID_FLOAT8_E5M2:
        return 1;
    case BRAID_FLOAT16:
    case BRAID_BFLOAT16:
        return 2;
    case BRAID_INT32:
    case BRAID_UINT32:
    case BRAID_FLOAT32:
        return 4;
    default:
        return 8;
    }
}

static const char *dtname(braid_datatype_t dt)
{
    static const char *const n[] = {"int8",    "uint8",   "int32",       "uint32",
                                    "int64",   "uint64",  "float16",     "bfloat16",
                                    "float32", "float64", "float8_e4m3", "float8_e5m2"};
    return n[dt];
}

static const char *opname(braid_redop_t op)
{
    static const char *const n[] = {"sum", "prod", "min", "max", "avg"};
    return n[op];
}

static inline int is_float(braid_datatype_t dt)
{
    return dt >= BRAID_FLOAT16;
}

static inline int is_signed_int(braid_datatype_t dt)
{
    return dt == BRAID_INT8 || dt == BRAID_INT32 || dt == BRAID_INT64;
}

static inline uint64_t width_mask(braid_datatype_t dt)
{
    size_t s = esize(dt);
    return s == 8 ? ~0ull : (1ull << (8 * s)) - 1;
}

static inline int64_t sign_extend(braid_datatype_t dt, uint64_t bits)
{
    unsigned w = (unsigned)(8 * esize(dt));
    if (w == 64) return (int64_t)bits;
    uint64_t sbit = 1ull << (w - 1);
    return (int64_t)((bits ^ sbit) - sbit);
}

/* Little-endian element access through memcpy (buffers may be misaligned). */
static inline uint64_t get_elem(braid_datatype_t dt, const void *buf, size_t i)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)buf + i * esize(dt), esize(dt));
    return v;
}

static inline void put_elem(braid_datatype_t dt, void *buf, size_t i, uint64_t bits)
{
    memcpy((char *)buf + i * esize(dt), &bits, esize(dt));
}

static inline int is_fp8(braid_datatype_t dt)
{
    return dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

/* ---- reference element ops ---------------------------------------------------------------- */

static inline uint64_t quiet_bit(braid_datatype_t dt)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return 0x200;
    case BRAID_BFLOAT16:
        return 0x40;
    case BRAID_FLOAT32:
        return 0x400000;
    case BRAID_FLOAT8_E4M3:
        return 0x7f; /* its one NaN (per sign): x | 0x7f == x */
    case BRAID_FLOAT8_E5M2:
        return 0x2;
    default:
        return 1ull << 51;
    }
}

static inline double decode(braid_datatype_t dt, uint64_t b)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return ref_h2d((uint16_t)b);
    case BRAID_BFLOAT16:
        return ref_bf2d((uint16_t)b);
    case BRAID_FLOAT32:
        return bits2f((uint32_t)b);
    case BRAID_FLOAT8_E4M3:
        return ref_e4m3_to_d((uint8_t)b);
    case BRAID_FLOAT8_E5M2:
        return ref_e5m2_to_d((uint8_t)b);
    default:
        return bits2d(b);
    }
}

/* v is already rounded to float32 for the float32-computed types. */
static inline uint64_t encode(braid_datatype_t dt, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return ref_d2h(v);
    case BRAID_BFLOAT16:
        return ref_d2bf(v);
    case BRAID_FLOAT32:
        return f2bits((float)v);
    case BRAID_FLOAT8_E4M3:
        return ref_d_to_e4m3(v);
    case BRAID_FLOAT8_E5M2:
        return ref_d_to_e5m2(v);
    default:
        return d2bits(v);
    }
}

enum { M_PAIR, M_FINAL, M_DIV };

typedef struct {
    uint64_t bits;
    int any_nan; /* a NaN the arithmetic made (inf - inf, 0 * inf): any quiet NaN will do */
} want_t;

static inline want_t ref_elem(braid_datatype_t dt, braid_redop_t op, int mode, uint64_t x,
                              uint64_t y, int nranks)
{
    want_t w = {0, 0};
    if (mode == M_DIV && op != BRAID_AVG) {
        w.bits = x;
        return w;
    }
    if (!is_float(dt)) {
        uint64_t m = width_mask(dt);
        uint64_t r;
        int sgn = is_signed_int(dt);
        if (mode == M_DIV) {
            r = sgn ? (uint64_t)(sign_extend(dt, x) / nranks) : x / (uint64_t)nranks;
        } else if (op == BRAID_SUM || op == BRAID_AVG) {
            r = x + y;
            if (op == BRAID_AVG && mode == M_FINAL) {
                r &= m;
                r = sgn ? (uint64_t)(sign_extend(dt, r) / nranks) : r / (uint64_t)nranks;
            }
        } else if (op == BRAID_PROD) {
            r = x * y;
        } else {
            int lt = sgn ? sign_extend(dt, x) < sign_extend(dt, y) : x < y;
            r = (op == BRAID_MIN) == lt ? x : y;
        }
        w.bits = r & m;
        return w;
    }
    uint64_t q = quiet_bit(dt);
    if (bits_isnan(dt, x)) {
        w.bits = x | q;
        return w;
    }
    if (mode != M_DIV && bits_isnan(dt, y)) {
        w.bits = y | q;
        return w;
    }
    double X = decode(dt, x), Y = decode(dt, y);
    int f32 = dt != BRAID_FLOAT64; /* computed in float32 */
    double r;
    if (op == BRAID_MIN || op == BRAID_MAX) {
        if (X < Y)
            w.bits = op == BRAID_MIN ? x : y;
        else if (Y < X)
            w.bits = op == BRAID_MIN ? y : x;
        else if (x == y)
            w.bits = x;
        else
            w.bits = (!!signbit(X) == (op == BRAID_MIN)) ? x : y; /* +0 vs -0 */
        /* float8 results go through the saturating conversion (an e5m2 inf becomes the max). */
        if (is_fp8(dt)) w.bits = encode(dt, decode(dt, w.bits));
        return w;
    }
    if (mode == M_DIV) {
        r = X / nranks;
    } else if (op == BRAID_PROD) {
        r = X * Y;
    } else {
        r = X + Y;
        if (op == BRAID_AVG && mode == M_FINAL) {
            if (f32) r = (float)r;
            r = r / nranks;
        }
    }
    if (f32) r = (float)r;
    if (isnan(r)) {
        w.any_nan = 1;
        return w;
    }
    w.bits = encode(dt, r);
    return w;
}

/* BRAID_AVG of a floating dtype pre-scales each input (braid.h, as NCCL's ncclAvg): x times the
 * factor (float)(1.0 / n) (float64: 1.0 / n). For the float32-computed types the product of a
 * dtype value (<= 24 significant bits) and the float32 factor is exact in double, so one cast
 * rounds it to float32, then encode() to the dtype (float8 saturating); float64 multiplies in
 * double. A NaN input comes back quiet with its payload. */
static inline want_t ref_avg_prescale(braid_datatype_t dt, uint64_t x, int nranks)
{
    want_t w = {0, 0};
    if (bits_isnan(dt, x)) {
        w.bits = x | quiet_bit(dt);
        return w;
    }
    double X = decode(dt, x);
    double r =
        dt == BRAID_FLOAT64 ? X * (1.0 / nranks) : (float)(X * (double)(float)(1.0 / nranks));
    w.bits = encode(dt, r);
    return w;
}

static inline int want_ok(braid_datatype_t dt, want_t w, uint64_t got)
{
    if (w.any_nan) return bits_isnan(dt, got) && (got & quiet_bit(dt));
    return got == w.bits;
}

/* ---- inputs ------------------------------------------------------------------------------- */

/* Index-dependent element bits. Floats: mostly moderate values (sums and products that round,
 * cancel, overflow float16 and reach its subnormals); 1 in 8 (or all, if wild) arbitrary bit
 * patterns: NaNs with payloads, infinities, zeros, subnormals, huge values. */
static inline uint64_t gen_bits(braid_datatype_t dt, uint64_t idx, uint64_t seed, int wild)
{
    uint64_t h = mix64(idx * 0x2545f4914f6cdd1dull ^ mix64(seed));
    uint64_t s = (h >> 8) & 1;
    if (!is_float(dt)) return h & width_mask(dt);
    wild = wild || (h & 7) == 0;
    switch (dt) {
    case BRAID_FLOAT16:
        return wild ? (h >> 16) & 0xffff : s << 15 | (5 + (h >> 20) % 20) << 10 | (h >> 32 & 0x3ff);
    case BRAID_BFLOAT16:
        return wild ? (h >> 16) & 0xffff : s << 15 | (107 + (h >> 20) % 40) << 7 | (h >> 32 & 0x7f);
    case BRAID_FLOAT32:
        return wild ? (h >> 16) & 0xffffffffu
                    : s << 31 | (107 + (h >> 20) % 40) << 23 | (h >> 32 & 0x7fffff);
    case BRAID_FLOAT8_E4M3: /* exponents 1..14 (2^-6 .. 2^7): sums and products saturate */
        return wild ? (h >> 16) & 0xff : s << 7 | (1 + (h >> 20) % 14) << 3 | (h >> 32 & 0x7);
    case BRAID_FLOAT8_E5M2:
        return wild ? (h >> 16) & 0xff : s << 7 | (3 + (h >> 20) % 26) << 2 | (h >> 32 & 0x3);
    default:
        return wild ? mix64(h) : s << 63 | (1003 + (h >> 20) % 40) << 52 | (mix64(h) >> 12);
    }
}

#endif
