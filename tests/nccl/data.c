/* Test data of the NCCL client: small values that every NCCL datatype holds exactly, chosen
 * per op so that every partial result of any reduction order is exact too (the ring reduces
 * in its own order); the reference is computed here in double / 64-bit integers and encoded
 * into the datatype independently of braid.
 *   sum, min, max: integers in [-5, 5] ([0, 10] unsigned; [-1, 1] for the float8 types);
 *   prod: -1, 1 and 2 (1 and 2 unsigned), integers wrap as two's complement;
 *   avg: integers b + d with d = +-k on pairs of ranks (0 on an odd last rank), so the average
 *   is b; floats n * k with k in -4..4 (powers of two and 0; -1..1 for float8): braid scales
 *   float16/bfloat16/float8 inputs by 1/n, then sums (as NCCL), and up to n = 8 each scaled
 *   input is exactly k (the float32 product n * k * (float)(1/n) rounds to k) with every
 *   partial sum of the k exact; float32/float64 sum the n * k exactly and divide once: either
 *   way the average is the sum of the k. */
#include "client.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t dt_size(ncclDataType_t dt)
{
    switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

const char *dt_name(ncclDataType_t dt)
{
    static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",  "uint64",
                                  "float16", "float32", "float64", "bfloat16", "f8e4m3", "f8e5m2"};
    return (int)dt >= 0 && (int)dt < ncclNumTypes ? names[dt] : "?";
}

const char *op_name(ncclRedOp_t op)
{
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};
    return (int)op >= 0 && (int)op < ncclNumOps ? names[op] : "premulsum";
}

static int is_unsigned(ncclDataType_t dt)
{
    return dt == ncclUint8 || dt == ncclUint32 || dt == ncclUint64;
}

static int is_fp8(ncclDataType_t dt)
{
    return dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
}

static unsigned mix(int r, size_t i, int seed)
{
    unsigned h = (unsigned)r * 2654435761u ^ (unsigned)i * 40503u ^ (unsigned)seed * 97u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    return h ^ (h >> 15);
}

double in_value(ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t i, int seed)
{
    unsigned h = mix(r, i, seed);
    int span = is_fp8(dt) ? 1 : 5;
    if (op == ncclProd) {
        if (is_unsigned(dt)) return (h % 3 == 0) ? 2 : 1;
        int k = (int)(h % 4);
        return k == 0 ? 2 : k == 1 ? -1 : 1;
    }
    if (op == ncclAvg && dt > ncclUint64) {
        static const int ks[] = {-4, -2, -1, 0, 1, 2, 4};
        int k = is_fp8(dt) ? (int)(h % 3) - 1 : ks[h % 7];
        return (double)n * k;
    }
    if (op == ncclAvg) {
        unsigned b = mix(0, i, seed + 7);
        double base = is_unsigned(dt) ? (double)(b % 6) + 2 : (double)((int)(b % 3) - 1);
        if (r == n - 1 && n % 2) return base; /* the odd one out */
        unsigned dh = mix(r / 2, i, seed + 3);
        double d = is_fp8(dt) ? (double)(dh % 2) : (double)(dh % 3);
        return r % 2 ? base - d : base + d;
    }
    if (is_unsigned(dt)) return (double)(h % 11);
    return (double)((int)(h % (unsigned)(2 * span + 1)) - span);
}

/* v exactly representable: sign, exponent field, mantissa of a binary minifloat. */
static uint32_t minifloat(double v, int ebits, int mbits)
{
    if (v == 0) return signbit(v) ? 1u << (ebits + mbits) : 0; /* -0 keeps its sign */
    uint32_t sign = v < 0 ? 1u : 0u;
    int e;
    double m = frexp(fabs(v), &e); /* v = m * 2^e, m in [0.5, 1) */
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t ef = (uint32_t)(e - 1 + bias);
    uint32_t mf = (uint32_t)llround((2 * m - 1) * (double)(1u << mbits));
    return sign << (ebits + mbits) | ef << mbits | mf;
}

void store(void *buf, ncclDataType_t dt, size_t i, double v)
{
    char *p = (char *)buf + i * dt_size(dt);
    switch (dt) {
    case ncclInt8:
        *(int8_t *)p = (int8_t)(int64_t)v;
        break;
    case ncclUint8:
        *(uint8_t *)p = (uint8_t)(uint64_t)(int64_t)v;
        break;
    case ncclInt32: {
        int32_t x = (int32_t)(int64_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case ncclUint32: {
        uint32_t x = (uint32_t)(uint64_t)(int64_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case ncclInt64: {
        int64_t x = (int64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    case ncclUint64: {
        uint64_t x = (uint64_t)(int64_t)v;
        memcpy(p, &x, 8);
        break;
    }
    case ncclFloat16: {
        uint16_t x = (uint16_t)minifloat(v, 5, 10);
        memcpy(p, &x, 2);
        break;
    }
    case ncclBfloat16: {
        uint16_t x = (uint16_t)minifloat(v, 8, 7);
        memcpy(p, &x, 2);
        break;
    }
    case ncclFloat32: {
        float x = (float)v;
        memcpy(p, &x, 4);
        break;
    }
    case ncclFloat64:
        memcpy(p, &v, 8);
        break;
    case ncclFloat8e4m3:
        *(uint8_t *)p = (uint8_t)minifloat(v, 4, 3);
        break;
    case ncclFloat8e5m2:
        *(uint8_t *)p = (uint8_t)minifloat(v, 5, 2);
        break;
    default:
        break;
    }
}

void fill(void *buf, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t base, size_t count,
          int seed)
{
    for (size_t k = 0; k < count; k++)
        store(buf, dt, k, in_value(dt, op, r, n, base + k, seed));
}

/* Integer types: the reduction in 64-bit two's complement (the store truncates: wrapping). */
void expect_reduced(void *out, ncclDataType_t dt, ncclRedOp_t op, int n, size_t i, int seed,
                    double premul)
{
    int integer = dt <= ncclUint64;
    int64_t acc = 0;
    double facc = 0;
    for (int r = 0; r < n; r++) {
        double v = in_value(dt, op, r, n, i, seed);
        if (premul != 0) v *= premul;
        int64_t iv = (int64_t)v;
        if (r == 0) {
            acc = iv;
            facc = v;
            continue;
        }
        switch (op) {
        case ncclProd:
            acc = (int64_t)((uint64_t)acc * (uint64_t)iv);
            facc *= v;
            break;
        case ncclMax:
            acc = iv > acc ? iv : acc;
            facc = v > facc ? v : facc;
            break;
        case ncclMin:
            acc = iv < acc ? iv : acc;
            facc = v < facc ? v : facc;
            break;
        default: /* sum, avg, premulsum */
            acc += iv;
            facc += v;
            break;
        }
    }
    if (op == ncclAvg) {
        acc /= n;
        facc /= n;
    }
    if (integer && op == ncclProd) {
        /* Wrapping: the store's narrowing cast keeps the low bits. */
        memcpy(out, &acc, dt_size(dt));
        return;
    }
    store(out, dt, 0, integer ? (double)acc : facc);
}

static size_t compare(const void *got, const void *want, ncclDataType_t dt, size_t base, size_t k,
                      const char *what, size_t bad)
{
    size_t sz = dt_size(dt);
    if (!memcmp((const char *)got + k * sz, want, sz)) return 0;
    if (bad < 4) {
        uint64_t g = 0, w = 0;
        memcpy(&g, (const char *)got + k * sz, sz);
        memcpy(&w, want, sz);
        fprintf(stderr, "rank %d: %s: %s index %zu: got 0x%llx, want 0x%llx\n", g_rank, what,
                dt_name(dt), base + k, (unsigned long long)g, (unsigned long long)w);
    }
    return 1;
}

size_t check_reduced(const void *got, ncclDataType_t dt, ncclRedOp_t op, int n, size_t base,
                     size_t count, int seed, double premul, const char *what)
{
    size_t bad = 0;
    char want[8];
    for (size_t k = 0; k < count; k++) {
        expect_reduced(want, dt, op, n, base + k, seed, premul);
        bad += compare(got, want, dt, base, k, what, bad);
    }
    return bad;
}

size_t check_rank(const void *got, ncclDataType_t dt, ncclRedOp_t op, int src, int n, size_t base,
                  size_t count, int seed, const char *what)
{
    size_t bad = 0;
    char want[8];
    for (size_t k = 0; k < count; k++) {
        store(want, dt, 0, in_value(dt, op, src, n, base + k, seed));
        bad += compare(got, want, dt, base, k, what, bad);
    }
    return bad;
}
