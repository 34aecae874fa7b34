#include "data.h"
#include "ref_fp8.h"
#include "ref_half.h"
#include "reduce/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int is_float(braid_datatype_t dt)
{
    return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 || dt == BRAID_FLOAT32 ||
           dt == BRAID_FLOAT64 || dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static int is_fp8(braid_datatype_t dt)
{
    return dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

static int is_signed(braid_datatype_t dt)
{
    return dt == BRAID_INT8 || dt == BRAID_INT32 || dt == BRAID_INT64 || is_float(dt);
}

/* Floating avg (float16/bfloat16/float8: a sum of inputs pre-scaled by 1/n, which round where n
 * is not a power of two): at most two ranks of an index hold a nonzero value, the others +0, so
 * its sum is the same in every order (x + 0 = x exactly; with two nonzero terms every order
 * adds those two). The two depend on the index (not on n): rank a = 0 or 1, and rank a ^ 1 or
 * one of ranks 2..7. float32/float64 get the same inputs (their avg divides the exact sum). */
static int avg_active(int rank, size_t i, int seed)
{
    uint64_t h = ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)seed * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    int a = (int)(h & 1), b = (h >> 1 & 1) ? a ^ 1 : 2 + (int)((h >> 2) % 6);
    return rank == a || rank == b;
}

/* data_value, inlined into the fill and reference loops below */
static inline double value(braid_datatype_t dt, braid_redop_t op, int rank, size_t i, int seed)
{
    uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)rank * 40503u + (uint64_t)seed * 977u;
    h ^= h >> 13;
    if (op == BRAID_AVG && is_float(dt) && !avg_active(rank, i, seed)) return 0;
    if (op == BRAID_PROD) {
        /* Products stay exact: +-1, 2 and (floats) 0.5. */
        static const double fv[] = {1, 2, -1, 0.5, 1, -1, 2};
        static const double sv[] = {1, 2, -1, 1, 3, -1, 1};
        static const double uv[] = {1, 2, 1, 3, 1, 1, 2};
        if (is_float(dt)) return fv[h % 7];
        return is_signed(dt) ? sv[h % 7] : uv[h % 7];
    }
    if (is_fp8(dt)) {
        /* float8 holds few integers: min/max pick any finite code below 2^6 (exact selections);
         * sum/avg use multiples of 1/4 (e4m3) or integers (e5m2) whose partial sums over up
         * to 8 ranks stay exact (|sum| <= 4, resp. 8). */
        if (op == BRAID_MIN || op == BRAID_MAX) {
            uint8_t code = (uint8_t)(h % (dt == BRAID_FLOAT8_E4M3 ? 0x68 : 0x58));
            if (code) code |= (uint8_t)((h & 0x100) >> 1); /* no -0: the reference orders zeros */
            return dt == BRAID_FLOAT8_E4M3 ? braid_e4m3_to_float(code) : braid_e5m2_to_float(code);
        }
        if (dt == BRAID_FLOAT8_E4M3) return ((int)(h % 5) - 2) * 0.25;
        return (int)(h % 3) - 1;
    }
    if (op == BRAID_MIN || op == BRAID_MAX) {
        int v = (int)(h % 201);
        return is_signed(dt) ? v - 100 : v;
    }
    int v = (int)(h % 23);
    return is_signed(dt) ? v - 11 : v;
}

double data_value(braid_datatype_t dt, braid_redop_t op, int rank, size_t i, int seed)
{
    return value(dt, op, rank, i, seed);
}

/* Stores v as one dtype element at p, through memcpy of the element's size (buffers may be
 * misaligned on purpose; a constant size per case keeps it a plain store). */
static void store(void *p, braid_datatype_t dt, double v)
{
    switch (dt) {
    case BRAID_INT8: {
        int8_t t = (int8_t)(int64_t)v;
        memcpy(p, &t, 1);
        return;
    }
    case BRAID_UINT8: {
        uint8_t t = (uint8_t)(uint64_t)v;
        memcpy(p, &t, 1);
        return;
    }
    case BRAID_INT32: {
        int32_t t = (int32_t)(int64_t)v;
        memcpy(p, &t, 4);
        return;
    }
    case BRAID_UINT32: {
        uint32_t t = (uint32_t)(uint64_t)v;
        memcpy(p, &t, 4);
        return;
    }
    case BRAID_INT64: {
        int64_t t = (int64_t)v;
        memcpy(p, &t, 8);
        return;
    }
    case BRAID_UINT64: {
        uint64_t t = (uint64_t)v;
        memcpy(p, &t, 8);
        return;
    }
    case BRAID_FLOAT16: {
        uint16_t t = braid_float_to_half((float)v);
        memcpy(p, &t, 2);
        return;
    }
    case BRAID_BFLOAT16: {
        uint16_t t = braid_float_to_bf16((float)v);
        memcpy(p, &t, 2);
        return;
    }
    case BRAID_FLOAT32: {
        float t = (float)v;
        memcpy(p, &t, 4);
        return;
    }
    case BRAID_FLOAT64:
        memcpy(p, &v, 8);
        return;
    case BRAID_FLOAT8_E4M3: {
        uint8_t t = braid_float_to_e4m3((float)v);
        memcpy(p, &t, 1);
        return;
    }
    case BRAID_FLOAT8_E5M2: {
        uint8_t t = braid_float_to_e5m2((float)v);
        memcpy(p, &t, 1);
        return;
    }
    default:
        return;
    }
}

void data_fill(void *buf, braid_datatype_t dt, braid_redop_t op, int rank, size_t base,
               size_t count, int seed)
{
    size_t es = braid_dtype_size(dt);
    for (size_t k = 0; k < count; k++)
        store((char *)buf + k * es, dt, value(dt, op, rank, base + k, seed));
}

/* v (a float32 value, or any for float64) rounded to dtype dt by the tests' own conversions
 * (ref_half.h, ref_fp8.h: not the library's). */
static double to_dtype(braid_datatype_t dt, double v)
{
    switch (dt) {
    case BRAID_FLOAT16:
        return ref_h2d(ref_d2h(v));
    case BRAID_BFLOAT16:
        return ref_bf2d(ref_d2bf(v));
    case BRAID_FLOAT8_E4M3:
        return ref_e4m3_to_d(ref_d_to_e4m3(v));
    case BRAID_FLOAT8_E5M2:
        return ref_e5m2_to_d(ref_d_to_e5m2(v));
    case BRAID_FLOAT32:
        return (float)v;
    default:
        return v;
    }
}

/* float16/bfloat16/float8 avg as braid (and NCCL) defines it: each input times the factor
 * (float)(1.0/n), the product rounded to float32 then to the dtype, and the scaled inputs
 * summed. The product of a dtype value and a float32 factor is exact in double, so the casts
 * round it once to float32, as the library's float32 multiplication. The sum: at most two
 * nonzero terms (avg_active), exact in double, rounded as the library's one addition. */
static double expected_avg(braid_datatype_t dt, int n, size_t i, int seed)
{
    double f = (double)(float)(1.0 / n), acc = 0;
    for (int r = 0; r < n; r++)
        acc += to_dtype(dt, (double)(float)(value(dt, BRAID_AVG, r, i, seed) * f));
    return (float)acc;
}

/* Integer reductions wrap like the element type: compute in 64 bits and truncate. */
void data_expected(void *out, braid_datatype_t dt, braid_redop_t op, int n, size_t i, int seed)
{
    if (is_float(dt) && dt != BRAID_FLOAT32 && dt != BRAID_FLOAT64 && op == BRAID_AVG) {
        store(out, dt, expected_avg(dt, n, i, seed));
        return;
    }
    if (is_float(dt)) {
        double acc = value(dt, op, 0, i, seed);
        for (int r = 1; r < n; r++) {
            double v = value(dt, op, r, i, seed);
            switch (op) {
            case BRAID_SUM:
            case BRAID_AVG:
                acc += v;
                break;
            case BRAID_PROD:
                acc *= v;
                break;
            case BRAID_MIN:
                acc = v < acc ? v : acc;
                break;
            case BRAID_MAX:
                acc = v > acc ? v : acc;
                break;
            default:
                break;
            }
        }
        if (op == BRAID_AVG) acc /= n; /* float32, float64: the exact sum divided once */
        if (dt != BRAID_FLOAT32 && dt != BRAID_FLOAT64) acc = (float)acc; /* float32-computed */
        store(out, dt, acc);
        return;
    }
    int64_t acc = (int64_t)value(dt, op, 0, i, seed);
    for (int r = 1; r < n; r++) {
        int64_t v = (int64_t)value(dt, op, r, i, seed);
        switch (op) {
        case BRAID_SUM:
        case BRAID_AVG:
            acc = (int64_t)((uint64_t)acc + (uint64_t)v);
            break;
        case BRAID_PROD:
            acc = (int64_t)((uint64_t)acc * (uint64_t)v);
            break;
        case BRAID_MIN:
            acc = v < acc ? v : acc;
            break;
        case BRAID_MAX:
            acc = v > acc ? v : acc;
            break;
        default:
            break;
        }
    }
    if (op == BRAID_AVG) {
        /* Sums here never wrap, so the element type's truncating division is int64's. */
        acc /= n;
    }
    store(out, dt, (double)acc);
}

/* The expected elements are built a block at a time and compared with one memcmp per block;
 * only a block that differs is compared element by element (to count and print). */
static size_t compare(const void *got, const void *want_fn_arg, braid_datatype_t dt, size_t count,
                      const char *what, void (*want)(void *out, size_t k, const void *arg))
{
    enum { BLOCK = 512 };
    size_t es = braid_dtype_size(dt), bad = 0;
    unsigned char w[BLOCK * 8];
    for (size_t k0 = 0; k0 < count; k0 += BLOCK) {
        size_t m = count - k0 < BLOCK ? count - k0 : BLOCK;
        const unsigned char *g = (const unsigned char *)got + k0 * es;
        for (size_t j = 0; j < m; j++)
            want(w + j * es, k0 + j, want_fn_arg);
        if (!memcmp(g, w, m * es)) continue;
        for (size_t j = 0; j < m; j++) {
            if (!memcmp(g + j * es, w + j * es, es)) continue;
            if (bad < 3) {
                uint64_t gv = 0, xv = 0;
                memcpy(&gv, g + j * es, es);
                memcpy(&xv, w + j * es, es);
                fprintf(stderr, "%s: %s element %zu: got 0x%llx, want 0x%llx\n", what,
                        braid_dtype_name(dt), k0 + j, (unsigned long long)gv,
                        (unsigned long long)xv);
            }
            bad++;
        }
    }
    return bad;
}

typedef struct {
    braid_datatype_t dt;
    braid_redop_t op;
    int n, src, seed;
    size_t base;
} want_t;

static void want_reduced(void *out, size_t k, const void *arg)
{
    const want_t *w = arg;
    data_expected(out, w->dt, w->op, w->n, w->base + k, w->seed);
}

static void want_rank(void *out, size_t k, const void *arg)
{
    const want_t *w = arg;
    store(out, w->dt, value(w->dt, w->op, w->src, w->base + k, w->seed));
}

size_t data_check_reduced(const void *got, braid_datatype_t dt, braid_redop_t op, int n,
                          size_t base, size_t count, int seed, const char *what)
{
    want_t w = {.dt = dt, .op = op, .n = n, .seed = seed, .base = base};
    return compare(got, &w, dt, count, what, want_reduced);
}

size_t data_check_rank(const void *got, braid_datatype_t dt, braid_redop_t op, int src, size_t base,
                       size_t count, int seed, const char *what)
{
    want_t w = {.dt = dt, .op = op, .src = src, .seed = seed, .base = base};
    return compare(got, &w, dt, count, what, want_rank);
}

int data_check_allreduce(braid_comm_t comm, int rank, int n, braid_datatype_t dt, braid_redop_t op,
                         size_t count, int in_place, size_t off, int seed, const char *label)
{
    size_t es = braid_dtype_size(dt);
    char *sb = malloc(count * es + off + 1), *rb = malloc(count * es + off + 1);
    if (!sb || !rb) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        free(sb);
        free(rb);
        return 1;
    }
    char *s = sb + off, *r = in_place ? s : rb + off;
    data_fill(s, dt, op, rank, 0, count, seed);
    if (!in_place) memset(r, 0xAB, count * es);
    char what[192];
    snprintf(what, sizeof(what), "%s allreduce n=%d %s %s count=%zu %s off=%zu", label, n,
             braid_dtype_name(dt), braid_op_name(op), count, in_place ? "in-place" : "oop", off);
    braid_result_t res = braid_allreduce(s, r, count, dt, op, comm);
    size_t bad = res ? 0 : data_check_reduced(r, dt, op, n, 0, count, seed, what);
    free(sb);
    free(rb);
    if (res) {
        fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, braid_strerror(res),
                braid_last_error());
        return 1;
    }
    if (bad) {
        fprintf(stderr, "rank %d: %s: %zu wrong elements\n", rank, what, bad);
        return 1;
    }
    return 0;
}

int data_quick(void)
{
    const char *q = getenv("BRAID_TEST_QUICK");
    return q && *q && *q != '0';
}

void *data_xmalloc(size_t n)
{
    void *p = malloc(n + 64);
    if (!p) abort();
    return p;
}
