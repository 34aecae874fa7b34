/* Element generators, reference results and the checker of the perf tools.
 *
 * Every rank fills its input from a hash of (seed, element index, rank), so each rank can
 * compute the exact expected result of any collective on its own, without trusting anything
 * the library computed. Values are integers chosen so that results are exact in every dtype:
 *   sum, avg  values in [-M, M] (or [0, M] for unsigned) with nranks * M < 2^p, where p is the
 *             dtype's precision (11 bits for float16, 8 for bfloat16, 24 for float32) or its
 *             value bits (7 for int8): no partial sum rounds or overflows, in any order;
 *   min, max, copies  the same with nranks taken as 1;
 *   prod      integers: odd values of the full range, the product wraps (braid computes it
 *             unsigned, mod 2^bits); floats: each rank gives +-2^e (|e| <= 1), and one rank
 *             per element (drawn from the hash) 3 times that: every partial product is exact.
 * avg: float32/float64 divide the exact sum by nranks once, as the checker does; float16,
 * bfloat16 and float8 scale each input by 1/nranks first (as NCCL's ncclAvg) and get inputs
 * nranks * v (|nranks * v| <= 2^p - 1), so each scaled input is v exactly (the float32 product
 * nranks * v * (float)(1/nranks) is within a float32 ulp of v, which the dtype holds) and the
 * average is the exact sum of the v. Where nranks is not exact in the dtype (float8 above 8 or
 * 16 ranks, bfloat16 above 256), see avg_pick. Every result must match exactly. */
#include "common.h"

#include <math.h>
#include <string.h>

/* ---- names --------------------------------------------------------------------------------- */

typedef struct {
    const char *name; /* nccl-tests' name, printed */
    size_t size;
    int bits;      /* precision (floats) or value bits (integers) */
    int is_signed; /* signed integers and floats */
    int is_float;
} dtype_info_t;

static const dtype_info_t dtype_info[BRAID_NUM_DTYPES] = {
    [BRAID_INT8] = {"int8", 1, 7, 1, 0},          [BRAID_UINT8] = {"uint8", 1, 8, 0, 0},
    [BRAID_INT32] = {"int32", 4, 31, 1, 0},       [BRAID_UINT32] = {"uint32", 4, 32, 0, 0},
    [BRAID_INT64] = {"int64", 8, 63, 1, 0},       [BRAID_UINT64] = {"uint64", 8, 64, 0, 0},
    [BRAID_FLOAT16] = {"half", 2, 11, 1, 1},      [BRAID_BFLOAT16] = {"bfloat16", 2, 8, 1, 1},
    [BRAID_FLOAT32] = {"float", 4, 24, 1, 1},     [BRAID_FLOAT64] = {"double", 8, 53, 1, 1},
    [BRAID_FLOAT8_E4M3] = {"f8e4m3", 1, 4, 1, 1}, [BRAID_FLOAT8_E5M2] = {"f8e5m2", 1, 3, 1, 1},
};

const int perf_all_dtypes[BRAID_NUM_DTYPES] = {
    BRAID_INT8,    BRAID_UINT8,    BRAID_INT32,       BRAID_UINT32,
    BRAID_INT64,   BRAID_UINT64,   BRAID_FLOAT16,     BRAID_FLOAT32,
    BRAID_FLOAT64, BRAID_BFLOAT16, BRAID_FLOAT8_E4M3, BRAID_FLOAT8_E5M2};

static const struct {
    const char *name;
    int dtype;
} dtype_aliases[] = {
    {"int8", BRAID_INT8},
    {"char", BRAID_INT8},
    {"uint8", BRAID_UINT8},
    {"int32", BRAID_INT32},
    {"int", BRAID_INT32},
    {"uint32", BRAID_UINT32},
    {"int64", BRAID_INT64},
    {"uint64", BRAID_UINT64},
    {"half", BRAID_FLOAT16},
    {"float16", BRAID_FLOAT16},
    {"fp16", BRAID_FLOAT16},
    {"bfloat16", BRAID_BFLOAT16},
    {"bf16", BRAID_BFLOAT16},
    {"float", BRAID_FLOAT32},
    {"float32", BRAID_FLOAT32},
    {"fp32", BRAID_FLOAT32},
    {"double", BRAID_FLOAT64},
    {"float64", BRAID_FLOAT64},
    {"fp64", BRAID_FLOAT64},
    {"f8e4m3", BRAID_FLOAT8_E4M3},
    {"fp8_e4m3", BRAID_FLOAT8_E4M3},
    {"float8_e4m3", BRAID_FLOAT8_E4M3},
    {"f8e5m2", BRAID_FLOAT8_E5M2},
    {"fp8_e5m2", BRAID_FLOAT8_E5M2},
    {"float8_e5m2", BRAID_FLOAT8_E5M2},
};

const char *perf_dtype_name(int dtype)
{
    if (dtype < 0 || dtype >= BRAID_NUM_DTYPES) return NULL;
    return dtype_info[dtype].name;
}

size_t perf_dtype_size(int dtype)
{
    if (dtype < 0 || dtype >= BRAID_NUM_DTYPES) return 0;
    return dtype_info[dtype].size;
}

int perf_dtype_parse(const char *s)
{
    if (strcmp(s, "all") == 0) return PERF_ALL;
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcmp(s, dtype_aliases[i].name) == 0) return dtype_aliases[i].dtype;
    return -2;
}

static const char *const op_names[PERF_NUM_OPS] = {
    [BRAID_SUM] = "sum", [BRAID_PROD] = "prod", [BRAID_MIN] = "min",
    [BRAID_MAX] = "max", [BRAID_AVG] = "avg",   [PERF_OP_MULSUM] = "mulsum",
};

/* nccl-tests' order for -o all. */
const int perf_all_ops[PERF_NUM_OPS] = {BRAID_SUM, BRAID_PROD, BRAID_MAX,
                                        BRAID_MIN, BRAID_AVG,  PERF_OP_MULSUM};

const char *perf_op_name(int op)
{
    if (op == PERF_NO_OP) return "none";
    if (op < 0 || op >= PERF_NUM_OPS) return "invalid";
    return op_names[op];
}

int perf_op_parse(const char *s)
{
    if (strcmp(s, "all") == 0) return PERF_ALL;
    for (int i = 0; i < PERF_NUM_OPS; i++)
        if (strcmp(s, op_names[i]) == 0) return i;
    if (strcmp(s, "premulsum") == 0) return PERF_OP_MULSUM;
    return -2;
}

/* ---- float16 / bfloat16 -------------------------------------------------------------------- */

uint16_t perf_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (kept quiet) */
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero); units of 2^-24 */
        float a;
        memcpy(&a, &ax, sizeof(a));
        return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f)); /* exact scale, RNE */
    }
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float perf_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t perf_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float perf_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* float8 (e4m3: bias 7, max 448, no inf; e5m2: bias 15, max 57344), nearest even and
 * saturating as braid; written with frexp/ldexp, independently of braid's bit code. */
static uint8_t perf_float_to_f8(float f, int mbits, int bias, double max, uint8_t maxcode)
{
    uint8_t sign = signbit(f) ? 0x80 : 0;
    double a = fabs((double)f);
    if (a != a) return (uint8_t)(sign | (mbits == 3 ? 0x7f : 0x7e));
    if (a >= max) return (uint8_t)(sign | maxcode);
    double minnorm = ldexp(1.0, 1 - bias);
    if (a < minnorm) return (uint8_t)(sign | (uint8_t)rint(ldexp(a, bias - 1 + mbits)));
    int e;
    double q = rint(ldexp(frexp(a, &e), mbits + 1)); /* [2^m, 2^(m+1)] */
    if (q == ldexp(1.0, mbits + 1)) {
        q /= 2;
        e++;
    }
    return (uint8_t)(sign | ((e - 1 + bias) << mbits) | ((int)q - (1 << mbits)));
}

static float perf_f8_to_float(uint8_t b, int mbits, int bias)
{
    int e = (b & 0x7f) >> mbits, m = b & ((1 << mbits) - 1), emax = (1 << (7 - mbits)) - 1;
    float s = (b & 0x80) ? -1.0f : 1.0f;
    if (mbits == 3 && (b & 0x7f) == 0x7f) return NAN;
    if (mbits == 2 && e == emax) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexpf((float)m, 1 - bias - mbits);
    return s * ldexpf((float)((1 << mbits) + m), e - bias - mbits);
}

uint8_t perf_float_to_e4m3(float f)
{
    return perf_float_to_f8(f, 3, 7, 448.0, 0x7e);
}

float perf_e4m3_to_float(uint8_t b)
{
    return perf_f8_to_float(b, 3, 7);
}

uint8_t perf_float_to_e5m2(float f)
{
    return perf_float_to_f8(f, 2, 15, 57344.0, 0x7b);
}

float perf_e5m2_to_float(uint8_t b)
{
    return perf_f8_to_float(b, 2, 15);
}

int perf_mulsum_scalar(int rank)
{
    return 1 + (rank & 1);
}

/* ---- generators ---------------------------------------------------------------------------- */

static inline uint32_t mix(uint64_t seed, uint64_t idx, uint64_t salt)
{
    uint64_t x = idx * 0x9e3779b97f4a7c15ull + (seed << 20) + salt * 0xd1b54a32d192ed03ull;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (uint32_t)(x >> 32);
}

#define PERF_MAX_MAG (1ull << 20)

static inline void store_double(int dtype, void *buf, size_t i, double v);
static inline double load_float(int dtype, const void *buf, size_t i);

/* The value of code c of a 16- or 8-bit float dtype. */
static double small_float_value(int dtype, uint32_t c)
{
    switch (dtype) {
    case BRAID_FLOAT16:
        return perf_half_to_float((uint16_t)c);
    case BRAID_BFLOAT16:
        return perf_bf16_to_float((uint16_t)c);
    case BRAID_FLOAT8_E4M3:
        return perf_e4m3_to_float((uint8_t)c);
    default:
        return perf_e5m2_to_float((uint8_t)c);
    }
}

/* Avg of a 16- or 8-bit float on n ranks where n is not exact in the dtype (so n * v is not
 * either): the input magnitude x (a value of the dtype within n/4 of n) whose scaled image
 * y = x * (float)(1/n), rounded to the dtype as braid's avg scales (braid.h), has the shortest
 * odd significand m (then the nearest to n); up to (2^bits - 1) / m ranks can each add +-y,
 * or 0, with every partial sum exact. */
static void avg_pick(perf_gen_t *g, int dtype, int nranks, int bits)
{
    double inv = (float)(1.0 / nranks);
    uint64_t best_m = 0;
    double best_d = 0;
    uint32_t ncodes = dtype == BRAID_FLOAT16 || dtype == BRAID_BFLOAT16 ? 0x8000 : 0x80;
    for (uint32_t c = 1; c < ncodes; c++) { /* the positive codes */
        double x = small_float_value(dtype, c), d = fabs(x - nranks);
        if (!isfinite(x) || d > nranks / 4.0 || x != (double)(int64_t)x) continue;
        /* the float32 product, then the dtype (yb: room for any dtype's element) */
        double yb = 0;
        store_double(dtype, &yb, 0, (float)(x * inv));
        double y = load_float(dtype, &yb, 0);
        if (!(y > 0) || !isfinite(y)) continue;
        int e;
        uint64_t m = (uint64_t)ldexp(frexp(y, &e), 62); /* y's significand, odd part below */
        while (m && !(m & 1))
            m >>= 1;
        if (m && (!best_m || m < best_m || (m == best_m && d < best_d))) {
            best_m = m;
            best_d = d;
            g->avg_x = (int64_t)x;
            g->avg_y = y;
        }
    }
    if (!best_m) return; /* no usable x (n beyond the dtype's range): avg_x stays 0 */
    uint64_t k = ((1ull << bits) - 1) / best_m;
    if (k < (uint64_t)g->nz_ranks) g->nz_ranks = (int)k;
}

void perf_gen_init(perf_gen_t *g, int dtype, int op, int nranks, uint64_t seed)
{
    const dtype_info_t *t = &dtype_info[dtype];
    int sums = op == BRAID_SUM || op == BRAID_AVG || op == PERF_OP_MULSUM;
    int per = op == PERF_OP_MULSUM ? 2 : 1; /* the largest mulsum scalar */
    int scale = sums ? per * nranks : 1;
    uint64_t limit = t->bits >= 64 ? UINT64_MAX : (1ull << t->bits) - 1;
    /* float8 holds integers exactly only up to 2^bits (16, 8): when more ranks add than that
     * allows with values +-1, only the first `limit` ranks contribute (the others send 0). */
    g->nz_ranks = nranks;
    if ((uint64_t)scale > limit && t->is_float) {
        g->nz_ranks = (int)limit / per;
        scale = per * g->nz_ranks;
    }
    uint64_t m = limit / (uint64_t)(scale > 0 ? scale : 1);
    if (m > PERF_MAX_MAG) m = PERF_MAX_MAG;
    if (m < 1) m = 1;
    g->dtype = dtype;
    g->op = op;
    g->nranks = nranks;
    g->seed = seed;
    g->avg_x = 0;
    g->avg_y = 0;
    /* avg scales 16- and 8-bit float inputs by 1/n: inputs n * v need n exact in the dtype */
    if (op == BRAID_AVG && t->is_float && t->size < 4 && g->nz_ranks < nranks) {
        avg_pick(g, dtype, nranks, t->bits);
        m = 1;
    }
    if (t->is_signed) {
        g->lo = -(int64_t)m;
        g->span = 2 * m + 1;
    } else {
        g->lo = 0;
        g->span = m + 1;
    }
}

/* The rank that contributes the factor 3 (or 1.5) of element idx under a floating prod. */
static inline int prod_special(const perf_gen_t *g, uint64_t idx)
{
    return (int)(mix(g->seed, idx, 0xffffffffull) % (uint32_t)g->nranks);
}

/* Largest |exponent| a rank's factor may have under a floating prod so that every partial
 * product stays a normal number: float16 spans 2^-14..2^15, the others far more. */
static inline int prod_emax(const perf_gen_t *g)
{
    if (g->dtype == BRAID_FLOAT16 || g->dtype == BRAID_FLOAT8_E5M2) return g->nranks <= 12 ? 1 : 0;
    if (g->dtype == BRAID_FLOAT8_E4M3) return g->nranks <= 6 ? 1 : 0; /* 3 * 2^6 <= 448 */
    return g->nranks <= 100 ? 1 : 0;
}

/* Floating prod: +-2^e with |e| <= emax, times 3 on the special rank: exact in any order. */
static inline double fprod_value(const perf_gen_t *g, uint64_t idx, int rank, int special)
{
    uint32_t h = mix(g->seed, idx, (uint64_t)rank);
    int emax = prod_emax(g);
    int e = (int)((h >> 1) % (uint32_t)(2 * emax + 1)) - emax;
    double v = ldexp(h & 1 ? -1.0 : 1.0, e);
    return rank == special ? 3.0 * v : v;
}

static inline int64_t int_value(const perf_gen_t *g, uint64_t idx, int rank)
{
    if (rank >= g->nz_ranks) return 0;
    int64_t v = g->lo + (int64_t)(mix(g->seed, idx, (uint64_t)rank) % g->span);
    /* float16/bfloat16/float8 avg: nranks * v, whose scaling by 1/nranks gives v back, or
     * v * avg_x (v in -1..1) where nranks is not exact in the dtype (avg_pick) */
    if (g->op == BRAID_AVG && dtype_info[g->dtype].is_float && dtype_info[g->dtype].size < 4)
        return v * (g->avg_x ? g->avg_x : g->nranks);
    /* Integer prod wraps (as braid documents); odd factors keep the product from collapsing
     * to 0 mod 2^bits, so a misplaced element still shows. */
    return g->op == BRAID_PROD ? (int64_t)((uint64_t)v | 1u) : v;
}

/* Stores integer v (exact in the dtype by construction; integers wrap) at element i. */
static inline void store_int(int dtype, void *buf, size_t i, int64_t v)
{
    switch (dtype) {
    case BRAID_INT8:
    case BRAID_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case BRAID_INT32:
    case BRAID_UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case BRAID_INT64:
    case BRAID_UINT64:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    case BRAID_FLOAT16:
        ((uint16_t *)buf)[i] = perf_float_to_half((float)v);
        break;
    case BRAID_BFLOAT16:
        ((uint16_t *)buf)[i] = perf_float_to_bf16((float)v);
        break;
    case BRAID_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case BRAID_FLOAT64:
        ((double *)buf)[i] = (double)v;
        break;
    case BRAID_FLOAT8_E4M3:
        ((uint8_t *)buf)[i] = perf_float_to_e4m3((float)v);
        break;
    case BRAID_FLOAT8_E5M2:
        ((uint8_t *)buf)[i] = perf_float_to_e5m2((float)v);
        break;
    default:
        break;
    }
}

static inline void store_double(int dtype, void *buf, size_t i, double v)
{
    switch (dtype) {
    case BRAID_FLOAT16:
        ((uint16_t *)buf)[i] = perf_float_to_half((float)v);
        break;
    case BRAID_BFLOAT16:
        ((uint16_t *)buf)[i] = perf_float_to_bf16((float)v);
        break;
    case BRAID_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case BRAID_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case BRAID_FLOAT8_E4M3:
        ((uint8_t *)buf)[i] = perf_float_to_e4m3((float)v);
        break;
    case BRAID_FLOAT8_E5M2:
        ((uint8_t *)buf)[i] = perf_float_to_e5m2((float)v);
        break;
    default:
        break;
    }
}

void perf_fill(const perf_gen_t *g, void *buf, size_t count, uint64_t idx0, int rank)
{
    if (g->op == BRAID_PROD && dtype_info[g->dtype].is_float) {
        for (size_t i = 0; i < count; i++) {
            uint64_t idx = idx0 + i;
            store_double(g->dtype, buf, i, fprod_value(g, idx, rank, prod_special(g, idx)));
        }
        return;
    }
    for (size_t i = 0; i < count; i++)
        store_int(g->dtype, buf, i, int_value(g, idx0 + i, rank));
}

void perf_fill_expected(const perf_gen_t *g, void *buf, size_t count, uint64_t idx0)
{
    int n = g->nranks, is_float = dtype_info[g->dtype].is_float;
    for (size_t i = 0; i < count; i++) {
        uint64_t idx = idx0 + i;
        if (g->op == BRAID_PROD && is_float) {
            int special = prod_special(g, idx);
            double acc = 1.0;
            for (int r = 0; r < n; r++)
                acc *= fprod_value(g, idx, r, special);
            store_double(g->dtype, buf, i, acc);
            continue;
        }
        if (g->op == BRAID_PROD) {
            uint64_t acc = 1; /* wraps mod 2^64, then the store truncates to the dtype */
            for (int r = 0; r < n; r++)
                acc *= (uint64_t)int_value(g, idx, r);
            store_int(g->dtype, buf, i, (int64_t)acc);
            continue;
        }
        int mul = g->op == PERF_OP_MULSUM;
        int64_t acc = int_value(g, idx, 0) * (mul ? perf_mulsum_scalar(0) : 1);
        for (int r = 1; r < n; r++) {
            int64_t v = int_value(g, idx, r) * (mul ? perf_mulsum_scalar(r) : 1);
            switch (g->op) {
            case BRAID_MIN:
                acc = v < acc ? v : acc;
                break;
            case BRAID_MAX:
                acc = v > acc ? v : acc;
                break;
            default:
                acc += v;
                break; /* sum, avg: no overflow by the choice of range */
            }
        }
        if (g->op == BRAID_AVG && g->avg_x) /* acc = avg_x * (sum of the v) */
            store_double(g->dtype, buf, i, (double)(acc / g->avg_x) * g->avg_y);
        else if (g->op == BRAID_AVG && is_float)
            store_double(g->dtype, buf, i, (double)acc / n);
        else if (g->op == BRAID_AVG)
            store_int(g->dtype, buf, i, acc / n); /* truncating, as braid's integer avg */
        else
            store_int(g->dtype, buf, i, acc);
    }
}

void perf_poison(void *dst, const void *exp, size_t bytes)
{
    const unsigned char *s = exp;
    unsigned char *d = dst;
    for (size_t i = 0; i < bytes; i++)
        d[i] = (unsigned char)~s[i];
}

static inline double load_float(int dtype, const void *buf, size_t i)
{
    switch (dtype) {
    case BRAID_FLOAT16:
        return perf_half_to_float(((const uint16_t *)buf)[i]);
    case BRAID_BFLOAT16:
        return perf_bf16_to_float(((const uint16_t *)buf)[i]);
    case BRAID_FLOAT32:
        return ((const float *)buf)[i];
    case BRAID_FLOAT8_E4M3:
        return perf_e4m3_to_float(((const uint8_t *)buf)[i]);
    case BRAID_FLOAT8_E5M2:
        return perf_e5m2_to_float(((const uint8_t *)buf)[i]);
    default:
        return ((const double *)buf)[i];
    }
}

size_t perf_check(const perf_gen_t *g, const void *got, const void *exp, size_t count)
{
    const dtype_info_t *t = &dtype_info[g->dtype];
    size_t wrong = 0;
    if (!t->is_float) {
        const unsigned char *a = got, *b = exp;
        for (size_t i = 0; i < count; i++)
            wrong += memcmp(a + i * t->size, b + i * t->size, t->size) != 0;
        return wrong;
    }
    for (size_t i = 0; i < count; i++) {
        double a = load_float(g->dtype, got, i), b = load_float(g->dtype, exp, i);
        wrong += !(a == b); /* NaN counts as wrong */
    }
    return wrong;
}

void perf_mulsum_scalar_bits(int dtype, int rank, void *out)
{
    memset(out, 0, 8);
    store_int(dtype, out, 0, perf_mulsum_scalar(rank));
}
