/* Element arithmetic of the CPU reduction kernels, private to src/reduce/.
 *
 * Every kernel variant (generic, avx2, avx512) is built from these static inline functions, so
 * the ISA paths compute the same function and the tests can demand bit-identical results.
 * They are written as branch-free selects over plain integer and float operations so that GCC
 * auto-vectorizes them when they are inlined into the loops of reduce_kernels.h.
 *
 * Semantics (the contract reduce.h states, in detail):
 * - Integers: sum and prod wrap (computed in the unsigned type); min/max compare signed or
 *   unsigned as the type is; avg divides the wrapped sum by nranks, truncating toward zero.
 * - float32/float64: IEEE arithmetic in the element's type. When an input is NaN the result is
 *   a quiet NaN carrying that input's payload; when both are NaN, a's payload wins (x86 alone
 *   would pick whichever operand the compiler put first, which differs between the scalar and
 *   the vector loop). min/max return NaN when either input is NaN (unlike fmin/fmax), and order
 *   the zeros: min(-0, +0) = -0 and max(-0, +0) = +0 whatever the argument order.
 * - float16/bfloat16: widened exactly to float32, combined as float32 above, rounded back to
 *   nearest-even once per kernel call (the avg kernels: the sum is divided by nranks in float32
 *   and rounded once; the collectives use them for integers, float32 and float64 only: their
 *   float16/bfloat16/float8 BRAID_AVG is a sum of inputs pre-scaled by 1/nranks, see "BRAID_AVG
 *   of floating dtypes" below). Results that are NaN are always quiet, so the F16C/AVX-512
 *   conversions (which quiet
 *   a signaling NaN) and the bit manipulation here give the same bits.
 * - float8 e4m3 / e5m2 (OCP FP8, as NCCL's ncclFloat8e4m3 / ncclFloat8e5m2): widened exactly to
 *   float32, combined as float32, rounded back to nearest-even once per element and kernel
 *   call, SATURATING like CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...), which NCCL's
 *   fp8 kernels use: every result beyond the largest finite value, infinities included, becomes
 *   +-448 (e4m3) or +-57344 (e5m2); NaN stays NaN (e4m3: 0x7f/0xff, its only NaNs; e5m2: sign
 *   and top payload bit kept, quiet). So an e5m2 infinity that enters an arithmetic op leaves it
 *   as +-57344, as it does in NCCL. NCCL combines fp8 in float16 arithmetic; braid's float32
 *   gives the correctly rounded result, which differs from NCCL's only where NCCL's float16
 *   intermediate rounds (or overflows) first.
 * - The conversions below ignore MXCSR (no float arithmetic except exact operations on normal
 *   numbers), so FTZ/DAZ set by the application do not change them; the arithmetic itself
 *   follows MXCSR identically on every path. */
#ifndef BRAID_REDUCE_REDUCE_OPS_H
#define BRAID_REDUCE_REDUCE_OPS_H

#include "reduce/reduce.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

/* Every element function is BRAID_ROP_FN: static inline for the C compiler, and also
 * __host__ __device__ when nvcc compiles this header into the CUDA kernels (src/cuda/), so the
 * GPU computes exactly these functions (nvcc without fast-math and with --fmad=false, see
 * src/cuda/CMakeLists.txt). Nothing else here may depend on the compiler. */
#if defined(__CUDACC__)
#define BRAID_ROP_FN static __host__ __device__ __forceinline__
#else
#define BRAID_ROP_FN static inline
#endif

/* ---- kernel table ------------------------------------------------------------------------ */

/* Operations that have their own kernel; BRAID_AVG combines with the sum kernel. */
enum { BRAID_ROP_SUM, BRAID_ROP_PROD, BRAID_ROP_MIN, BRAID_ROP_MAX, BRAID_ROP_NUM };

typedef void (*braid_reduce_pair_fn)(void *dst, const void *a, const void *b, size_t count);
typedef void (*braid_reduce_avg_fn)(void *dst, const void *a, const void *b, size_t count,
                                    int nranks);
typedef void (*braid_reduce_div_fn)(void *dst, const void *src, size_t count, int nranks);
typedef void (*braid_reduce_scale_fn)(void *dst, const void *src, size_t count, const void *scalar);
/* dst = the chain of ns (3 or 4) sources in one pass (see reduce_kernels.h); avg: the last step
 * divides by nranks. */
typedef void (*braid_reduce_multi_fn)(void *dst, const void *const *src, int ns, size_t count);
typedef void (*braid_reduce_multi_avg_fn)(void *dst, const void *const *src, int ns, size_t count,
                                          int nranks);

/* One ISA variant: every (dtype, op) kernel. dst may alias a, b or src exactly. */
typedef struct {
    const char *name; /* "generic", "avx2", "avx512" */
    braid_reduce_pair_fn pair[BRAID_NUM_DTYPES][BRAID_ROP_NUM];
    braid_reduce_avg_fn avg[BRAID_NUM_DTYPES];      /* dst = (a + b) / nranks */
    braid_reduce_div_fn div[BRAID_NUM_DTYPES];      /* dst = src / nranks */
    braid_reduce_scale_fn scale[BRAID_NUM_DTYPES];  /* dst = src prod scalar (PreMulSum) */
    braid_reduce_div_fn prescale[BRAID_NUM_DTYPES]; /* floats: dst = src * (1 / nranks) (avg) */
    braid_reduce_multi_fn multi[BRAID_NUM_DTYPES][BRAID_ROP_NUM];
    braid_reduce_multi_avg_fn multi_avg[BRAID_NUM_DTYPES];
} braid_reduce_table_t;

extern const braid_reduce_table_t braid_reduce_table_generic;
#if defined(__x86_64__) && defined(__GNUC__)
#define BRAID_REDUCE_X86 1
extern const braid_reduce_table_t braid_reduce_table_avx2;
extern const braid_reduce_table_t braid_reduce_table_avx512;
#else
#define BRAID_REDUCE_X86 0
#endif

/* ---- loop shape -------------------------------------------------------------------------- */

/* The element loops run in blocks with a constant trip count: GCC's -O2 cost model
 * ("very cheap") only vectorizes loops whose count is a known multiple of the vector width,
 * and ivdep tells it that dst may alias a or b only exactly (dependence distance 0), so it
 * needs no runtime overlap check. A small-block pass and a scalar loop take the tail. */
#if defined(__clang__)
#define BRAID_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define BRAID_IVDEP _Pragma("GCC ivdep")
#else
#define BRAID_IVDEP
#endif

#define BRAID_RK_BIG(T) (512 / sizeof(T))
#define BRAID_RK_SMALL(T) (64 / sizeof(T))
/* float16 values per block converted to float32 (in L1) by the float16 kernels. */
#define BRAID_RK_HBLK 64

/* Runs STMT for every k < n (k is a const size_t visible in STMT). */
#define BRAID_RK_FOR(T, n, k, STMT)                                                                \
    do {                                                                                           \
        size_t i_ = 0;                                                                             \
        for (; i_ + BRAID_RK_BIG(T) <= (n); i_ += BRAID_RK_BIG(T)) {                               \
            BRAID_IVDEP                                                                            \
            for (size_t j_ = 0; j_ < BRAID_RK_BIG(T); j_++) {                                      \
                const size_t k = i_ + j_;                                                          \
                STMT;                                                                              \
            }                                                                                      \
        }                                                                                          \
        for (; i_ + BRAID_RK_SMALL(T) <= (n); i_ += BRAID_RK_SMALL(T)) {                           \
            BRAID_IVDEP                                                                            \
            for (size_t j_ = 0; j_ < BRAID_RK_SMALL(T); j_++) {                                    \
                const size_t k = i_ + j_;                                                          \
                STMT;                                                                              \
            }                                                                                      \
        }                                                                                          \
        for (; i_ < (n); i_++) {                                                                   \
            const size_t k = i_;                                                                   \
            STMT;                                                                                  \
        }                                                                                          \
    } while (0)

/* Element types as the kernels access memory: alignment 1 (buffers may be misaligned by a
 * fraction of an element, e.g. a slot after a packed header; x86 loads do not care and the
 * vector loops use unaligned moves anyway) and may_alias (buffers are raw bytes to braid). */
#define BRAID_ROP_MEM __attribute__((aligned(1), may_alias))
typedef int8_t braid_rop_i8_mem BRAID_ROP_MEM;
typedef uint8_t braid_rop_u8_mem BRAID_ROP_MEM;
typedef int32_t braid_rop_i32_mem BRAID_ROP_MEM;
typedef uint32_t braid_rop_u32_mem BRAID_ROP_MEM;
typedef int64_t braid_rop_i64_mem BRAID_ROP_MEM;
typedef uint64_t braid_rop_u64_mem BRAID_ROP_MEM;
typedef uint16_t braid_rop_f16_mem BRAID_ROP_MEM;
typedef uint16_t braid_rop_bf16_mem BRAID_ROP_MEM;
typedef uint8_t braid_rop_e4m3_mem BRAID_ROP_MEM;
typedef uint8_t braid_rop_e5m2_mem BRAID_ROP_MEM;
typedef float braid_rop_f32_mem BRAID_ROP_MEM;
typedef double braid_rop_f64_mem BRAID_ROP_MEM;

/* ---- bit casts ---------------------------------------------------------------------------- */

BRAID_ROP_FN uint32_t braid_rop_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

BRAID_ROP_FN float braid_rop_f32_from(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

BRAID_ROP_FN uint64_t braid_rop_f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

BRAID_ROP_FN double braid_rop_f64_from(uint64_t u)
{
    double f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ---- float16 / bfloat16 conversions ------------------------------------------------------ */

/* float16 -> float32, exact for every pattern (a signaling NaN stays signaling, so all 65536
 * patterns round-trip through braid_rop_f2h). Subnormals: mant * 2^-24 is exact in float. */
BRAID_ROP_FN float braid_rop_h2f(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    /* the GPU's conversion is exact too; NaN and inf take the path below (payload kept) */
    if ((h & 0x7c00u) != 0x7c00u) return __half2float(__ushort_as_half(h));
#endif
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
    uint32_t special = 0x7f800000u | (mant << 13);
    uint32_t sub = braid_rop_f32_bits((float)(int32_t)mant * 0x1p-24f);
    uint32_t r = exp == 0x1fu ? special : (exp != 0 ? normal : sub);
    return braid_rop_f32_from(r | sign);
}

/* float32 -> float16, round to nearest even; overflow gives inf; a NaN keeps its sign and the
 * top 10 payload bits (quiet stays quiet), and becomes quiet if those bits are all zero. */
BRAID_ROP_FN uint16_t braid_rop_f2h(float f)
{
#if defined(__CUDA_ARCH__)
    /* the GPU's conversion rounds to nearest even as below; NaN takes the path below */
    if (f == f) return __half_as_ushort(__float2half_rn(f));
#endif
    uint32_t u = braid_rop_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t e = a >> 23;
    /* NaN. */
    uint32_t payload = (a >> 13) & 0x3ffu;
    uint32_t nan = 0x7c00u | payload | (payload == 0 ? 0x200u : 0u);
    /* Normal (e >= 113): rebias and round on the 13 dropped bits; a carry out of the
     * mantissa bumps the exponent, up to inf for values in [65520, 65536). */
    uint32_t nrm = (a >> 13) - (112u << 10);
    uint32_t nrem = a & 0x1fffu;
    nrm += (uint32_t)((nrem > 0x1000u) | ((nrem == 0x1000u) & nrm));
    /* Subnormal or zero (e < 113): value = m * 2^(e-126) units of 2^-24; shift right by
     * 126 - e in [14, 25] and round (shift 25 leaves only values below half a unit). */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t ec = e < 101u ? 101u : (e > 112u ? 112u : e);
    uint32_t s = 126u - ec;
    uint32_t sub = m >> s;
    uint32_t srem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    sub += (uint32_t)((srem > half) | ((srem == half) & sub));
    uint32_t r = a > 0x7f800000u ? nan : (a >= 0x47800000u ? 0x7c00u : (e >= 113u ? nrm : sub));
    return (uint16_t)(sign | r);
}

/* bfloat16 -> float32: exact. */
BRAID_ROP_FN float braid_rop_bf2f(uint16_t b)
{
    return braid_rop_f32_from((uint32_t)b << 16);
}

/* float32 -> bfloat16, round to nearest even (overflow carries into inf); a NaN keeps its sign
 * and top 7 payload bits (quiet stays quiet), and becomes quiet if those bits are all zero. */
BRAID_ROP_FN uint16_t braid_rop_f2bf(float f)
{
    uint32_t u = braid_rop_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t top = u >> 16;
    uint32_t nan = top | ((top & 0x7fu) == 0 ? 0x40u : 0u);
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

/* ---- float8 conversions (OCP FP8 e4m3 "fn" and e5m2) -------------------------------------- */

/* e4m3 -> float32, exact: bias 7, no infinities, S.1111.111 is the only NaN (quiet, sign
 * kept). Subnormals mant * 2^-9 are normalized with integer operations only: with float
 * arithmetic in a select GCC does not vectorize the loop (trapping math), with these it
 * does (AVX2, AVX-512). p is the position of mant's leading bit. */
BRAID_ROP_FN float braid_rop_e4m32f(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = ((uint32_t)b >> 3) & 0xfu;
    uint32_t mant = (uint32_t)b & 0x7u;
    uint32_t normal = ((exp + 120u) << 23) | (mant << 20);
    uint32_t p = (uint32_t)(mant >= 4u) + (uint32_t)(mant >= 2u);
    uint32_t sub = mant == 0 ? 0u : ((118u + p) << 23) | ((mant << (23u - p)) & 0x7fffffu);
    uint32_t r = (b & 0x7fu) == 0x7fu ? 0x7fc00000u : (exp != 0 ? normal : sub);
    return braid_rop_f32_from(r | sign);
}

/* float32 -> e4m3, round to nearest even, saturating: |x| >= 448 (inf included) gives +-448
 * (0x7e), every NaN gives 0x7f with x's sign. */
BRAID_ROP_FN uint8_t braid_rop_f2e4m3(float f)
{
    uint32_t u = braid_rop_f32_bits(f);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t e = a >> 23;
    /* Normal (|x| >= 2^-6, e >= 121): rebias and round on the 20 dropped bits; below the
     * saturation bound a carry out of the mantissa stays <= 0x7e. */
    uint32_t nrm = (a >> 20) - (120u << 3);
    uint32_t nrem = a & 0xfffffu;
    nrm += (uint32_t)((nrem > 0x80000u) | ((nrem == 0x80000u) & nrm));
    /* Subnormal or zero (e < 121): value = m * 2^(e-150) = (m >> (141 - e)) units of 2^-9;
     * shifts clamp to [21, 25] (a shift of 25 leaves only values below half a unit). */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t ec = e < 116u ? 116u : (e > 120u ? 120u : e);
    uint32_t s = 141u - ec;
    uint32_t sub = m >> s;
    uint32_t srem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    sub += (uint32_t)((srem > half) | ((srem == half) & sub));
    uint32_t r = a > 0x7f800000u ? 0x7fu : (a >= 0x43e00000u ? 0x7eu : (e >= 121u ? nrm : sub));
    return (uint8_t)(sign | r);
}

/* e5m2 -> float32, exact: the top byte of a float16 (bias 15, infinities, NaNs keep sign and
 * payload, a signaling one stays signaling). Subnormals mant * 2^-16, normalized with integer
 * operations as in braid_rop_e4m32f. */
BRAID_ROP_FN float braid_rop_e5m22f(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = ((uint32_t)b >> 2) & 0x1fu;
    uint32_t mant = (uint32_t)b & 0x3u;
    uint32_t normal = ((exp + 112u) << 23) | (mant << 21);
    uint32_t special = 0x7f800000u | (mant << 21);
    uint32_t p = (uint32_t)(mant >= 2u);
    uint32_t sub = mant == 0 ? 0u : ((111u + p) << 23) | ((mant << (23u - p)) & 0x7fffffu);
    uint32_t r = exp == 0x1fu ? special : (exp != 0 ? normal : sub);
    return braid_rop_f32_from(r | sign);
}

/* float32 -> e5m2, round to nearest even, saturating: |x| >= 57344 (inf included) gives
 * +-57344 (0x7b); a NaN keeps its sign and top 2 payload bits (quiet stays quiet) and becomes
 * quiet if those bits are zero. */
BRAID_ROP_FN uint8_t braid_rop_f2e5m2(float f)
{
    uint32_t u = braid_rop_f32_bits(f);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t e = a >> 23;
    uint32_t payload = (a >> 21) & 0x3u;
    uint32_t nan = 0x7cu | payload | (payload == 0 ? 0x2u : 0u);
    /* Normal (|x| >= 2^-14, e >= 113): round on the 21 dropped bits. */
    uint32_t nrm = (a >> 21) - (112u << 2);
    uint32_t nrem = a & 0x1fffffu;
    nrm += (uint32_t)((nrem > 0x100000u) | ((nrem == 0x100000u) & nrm));
    /* Subnormal or zero (e < 113): (m >> (134 - e)) units of 2^-16, shifts in [22, 25]. */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t ec = e < 109u ? 109u : (e > 112u ? 112u : e);
    uint32_t s = 134u - ec;
    uint32_t sub = m >> s;
    uint32_t srem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1u);
    sub += (uint32_t)((srem > half) | ((srem == half) & sub));
    uint32_t r = a > 0x7f800000u ? nan : (a >= 0x47600000u ? 0x7bu : (e >= 113u ? nrm : sub));
    return (uint8_t)(sign | r);
}

/* ---- floating-point element ops ---------------------------------------------------------- */

/* x is NaN ? x : y, written as a select of bits: as a conditional, GCC makes it a masked blend
 * with y as its memory operand, and a masked load waits for its mask, so y's load waited for
 * x's arithmetic (the kernels' chains of sources then read memory one stream at a time, at
 * about 0.7 of the speed: perf/RESULTS.md, session 23). */
BRAID_ROP_FN float braid_rop_f32_nanpick(float x, float y)
{
    uint32_t m = 0u - (uint32_t)(x != x);
    return braid_rop_f32_from((braid_rop_f32_bits(y) & ~m) | (braid_rop_f32_bits(x) & m));
}

/* r = x op y as x86 gives it: the first NaN operand, quieted, else the default NaN 0xffc00000
 * (inf - inf, 0 * inf). NVIDIA GPUs return one canonical NaN (0x7fffffff) from float32
 * arithmetic whatever the operands (seen on an H200: perf/RESULTS.md, GPU), so on the device
 * the result is fixed up to x86's; on the host this is r. */
BRAID_ROP_FN float braid_rop_f32_nanfix(float x, float y, float r)
{
#if defined(__CUDA_ARCH__)
    if (r == r) return r;
    uint32_t b = x != x ? braid_rop_f32_bits(x) : (y != y ? braid_rop_f32_bits(y) : 0xff800000u);
    return braid_rop_f32_from(b | 0x00400000u);
#else
    (void)x;
    (void)y;
    return r;
#endif
}

/* x + (x is NaN ? x : y): a NaN x yields quiet(x) even when y is NaN too (see the top). */
BRAID_ROP_FN float braid_rop_f32_sum(float x, float y)
{
    return braid_rop_f32_nanfix(x, y, x + braid_rop_f32_nanpick(x, y));
}

BRAID_ROP_FN float braid_rop_f32_prod(float x, float y)
{
    return braid_rop_f32_nanfix(x, y, x * braid_rop_f32_nanpick(x, y));
}

BRAID_ROP_FN float braid_rop_f32_min(float x, float y)
{
    uint32_t ux = braid_rop_f32_bits(x), uy = braid_rop_f32_bits(y);
    uint32_t r = x < y ? ux : uy;
    r = x == y ? (ux | uy) : r; /* -0 beats +0; equal non-zeros have equal bits */
    r = y != y ? (uy | 0x00400000u) : r;
    r = x != x ? (ux | 0x00400000u) : r;
    return braid_rop_f32_from(r);
}

BRAID_ROP_FN float braid_rop_f32_max(float x, float y)
{
    uint32_t ux = braid_rop_f32_bits(x), uy = braid_rop_f32_bits(y);
    uint32_t r = x > y ? ux : uy;
    r = x == y ? (ux & uy) : r; /* +0 beats -0 */
    r = y != y ? (uy | 0x00400000u) : r;
    r = x != x ? (ux | 0x00400000u) : r;
    return braid_rop_f32_from(r);
}

BRAID_ROP_FN double braid_rop_f64_nanpick(double x, double y)
{
    uint64_t m = 0u - (uint64_t)(x != x);
    return braid_rop_f64_from((braid_rop_f64_bits(y) & ~m) | (braid_rop_f64_bits(x) & m));
}

/* As braid_rop_f32_nanfix (float64 arithmetic on the GPU already passes a NaN operand on as
 * x86 does; the fix-up also gives x86's default NaN where neither operand is one). */
BRAID_ROP_FN double braid_rop_f64_nanfix(double x, double y, double r)
{
#if defined(__CUDA_ARCH__)
    if (r == r) return r;
    uint64_t b =
        x != x ? braid_rop_f64_bits(x) : (y != y ? braid_rop_f64_bits(y) : 0xfff0000000000000u);
    return braid_rop_f64_from(b | 0x0008000000000000u);
#else
    (void)x;
    (void)y;
    return r;
#endif
}

BRAID_ROP_FN double braid_rop_f64_sum(double x, double y)
{
    return braid_rop_f64_nanfix(x, y, x + braid_rop_f64_nanpick(x, y));
}

BRAID_ROP_FN double braid_rop_f64_prod(double x, double y)
{
    return braid_rop_f64_nanfix(x, y, x * braid_rop_f64_nanpick(x, y));
}

BRAID_ROP_FN double braid_rop_f64_min(double x, double y)
{
    uint64_t ux = braid_rop_f64_bits(x), uy = braid_rop_f64_bits(y);
    uint64_t r = x < y ? ux : uy;
    r = x == y ? (ux | uy) : r;
    r = y != y ? (uy | 0x0008000000000000u) : r;
    r = x != x ? (ux | 0x0008000000000000u) : r;
    return braid_rop_f64_from(r);
}

BRAID_ROP_FN double braid_rop_f64_max(double x, double y)
{
    uint64_t ux = braid_rop_f64_bits(x), uy = braid_rop_f64_bits(y);
    uint64_t r = x > y ? ux : uy;
    r = x == y ? (ux & uy) : r;
    r = y != y ? (uy | 0x0008000000000000u) : r;
    r = x != x ? (ux | 0x0008000000000000u) : r;
    return braid_rop_f64_from(r);
}

/* avg and finalize: IEEE division (never a multiplication by 1/n, which rounds differently). */
typedef float braid_rop_f32_dn_t;
typedef double braid_rop_f64_dn_t;
BRAID_ROP_FN float braid_rop_f32_dn(int nranks)
{
    return (float)nranks;
}
BRAID_ROP_FN double braid_rop_f64_dn(int nranks)
{
    return (double)nranks;
}
BRAID_ROP_FN float braid_rop_f32_div(float x, float dn)
{
    return braid_rop_f32_nanfix(x, dn, x / dn);
}
BRAID_ROP_FN float braid_rop_f32_avg(float x, float y, float dn)
{
    return braid_rop_f32_div(braid_rop_f32_sum(x, y), dn);
}
BRAID_ROP_FN double braid_rop_f64_div(double x, double dn)
{
    return braid_rop_f64_nanfix(x, dn, x / dn);
}
BRAID_ROP_FN double braid_rop_f64_avg(double x, double y, double dn)
{
    return braid_rop_f64_div(braid_rop_f64_sum(x, y), dn);
}

/* ---- bfloat16 element ops (float16 goes through blocks of float32, see the template) ------ */

#define BRAID_ROP_BF16_BINARY(opname)                                                              \
    BRAID_ROP_FN uint16_t braid_rop_bf16_##opname(uint16_t x, uint16_t y)                          \
    {                                                                                              \
        return braid_rop_f2bf(braid_rop_f32_##opname(braid_rop_bf2f(x), braid_rop_bf2f(y)));       \
    }
BRAID_ROP_BF16_BINARY(sum)
BRAID_ROP_BF16_BINARY(prod)
BRAID_ROP_BF16_BINARY(min)
BRAID_ROP_BF16_BINARY(max)
typedef float braid_rop_bf16_dn_t;
BRAID_ROP_FN float braid_rop_bf16_dn(int nranks)
{
    return (float)nranks;
}
BRAID_ROP_FN uint16_t braid_rop_bf16_avg(uint16_t x, uint16_t y, float dn)
{
    return braid_rop_f2bf(braid_rop_f32_avg(braid_rop_bf2f(x), braid_rop_bf2f(y), dn));
}
BRAID_ROP_FN uint16_t braid_rop_bf16_div(uint16_t x, float dn)
{
    return braid_rop_f2bf(braid_rop_f32_div(braid_rop_bf2f(x), dn));
}

/* ---- float8 element ops: float32 arithmetic, one saturating rounding ------------------------ */

#define BRAID_ROP_FP8(tag)                                                                         \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_sum(uint8_t x, uint8_t y)                               \
    {                                                                                              \
        return braid_rop_f2##tag(                                                                  \
            braid_rop_f32_sum(braid_rop_##tag##2f(x), braid_rop_##tag##2f(y)));                    \
    }                                                                                              \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_prod(uint8_t x, uint8_t y)                              \
    {                                                                                              \
        return braid_rop_f2##tag(                                                                  \
            braid_rop_f32_prod(braid_rop_##tag##2f(x), braid_rop_##tag##2f(y)));                   \
    }                                                                                              \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_min(uint8_t x, uint8_t y)                               \
    {                                                                                              \
        return braid_rop_f2##tag(                                                                  \
            braid_rop_f32_min(braid_rop_##tag##2f(x), braid_rop_##tag##2f(y)));                    \
    }                                                                                              \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_max(uint8_t x, uint8_t y)                               \
    {                                                                                              \
        return braid_rop_f2##tag(                                                                  \
            braid_rop_f32_max(braid_rop_##tag##2f(x), braid_rop_##tag##2f(y)));                    \
    }                                                                                              \
    typedef float braid_rop_##tag##_dn_t;                                                          \
    BRAID_ROP_FN float braid_rop_##tag##_dn(int nranks)                                            \
    {                                                                                              \
        return (float)nranks;                                                                      \
    }                                                                                              \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_avg(uint8_t x, uint8_t y, float dn)                     \
    {                                                                                              \
        return braid_rop_f2##tag(                                                                  \
            braid_rop_f32_avg(braid_rop_##tag##2f(x), braid_rop_##tag##2f(y), dn));                \
    }                                                                                              \
    BRAID_ROP_FN uint8_t braid_rop_##tag##_div(uint8_t x, float dn)                                \
    {                                                                                              \
        return braid_rop_f2##tag(braid_rop_##tag##2f(x) / dn);                                     \
    }
BRAID_ROP_FP8(e4m3)
BRAID_ROP_FP8(e5m2)

/* ---- BRAID_AVG of floating dtypes: the pre-scaling -------------------------------------- */

/* NCCL's ncclAvg of a floating dtype: every rank's input is multiplied by 1/nranks first, then
 * summed (a PreMulSum); braid does so for float16, bfloat16 and float8 (reduce.h). The factor is
 * (float)(1.0 / nranks) (NCCL's float32 scalar), or 1.0 / nranks for float64. Every narrow dtype
 * multiplies in float32 with that float32 factor and rounds the product once (NCCL rounds the
 * factor to the dtype first: the same where the dtype holds 1/nranks exactly, as for every power of
 * two up to its smallest subnormal). */
BRAID_ROP_FN float braid_rop_avg_factor_f32(int nranks)
{
    return (float)(1.0 / (double)nranks);
}
BRAID_ROP_FN double braid_rop_avg_factor_f64(int nranks)
{
    return 1.0 / (double)nranks;
}
typedef float braid_rop_f16_pre_t;
typedef float braid_rop_bf16_pre_t;
typedef float braid_rop_f32_pre_t;
typedef double braid_rop_f64_pre_t;
typedef float braid_rop_e4m3_pre_t;
typedef float braid_rop_e5m2_pre_t;
BRAID_ROP_FN uint16_t braid_rop_f16_pre(uint16_t x, float s)
{
    return braid_rop_f2h(braid_rop_f32_prod(braid_rop_h2f(x), s));
}
BRAID_ROP_FN uint16_t braid_rop_bf16_pre(uint16_t x, float s)
{
    return braid_rop_f2bf(braid_rop_f32_prod(braid_rop_bf2f(x), s));
}
BRAID_ROP_FN float braid_rop_f32_pre(float x, float s)
{
    return braid_rop_f32_prod(x, s);
}
BRAID_ROP_FN double braid_rop_f64_pre(double x, double s)
{
    return braid_rop_f64_prod(x, s);
}
BRAID_ROP_FN uint8_t braid_rop_e4m3_pre(uint8_t x, float s)
{
    return braid_rop_f2e4m3(braid_rop_f32_prod(braid_rop_e4m32f(x), s));
}
BRAID_ROP_FN uint8_t braid_rop_e5m2_pre(uint8_t x, float s)
{
    return braid_rop_f2e5m2(braid_rop_f32_prod(braid_rop_e5m22f(x), s));
}

/* ---- integer element ops ----------------------------------------------------------------- */

/* T the type, U its unsigned twin (arithmetic, forced to at least unsigned int so that no
 * promotion to int can overflow), W the wide type of avg's division (nranks may exceed T). */
#define BRAID_ROP_INT(tag, T, U, W)                                                                \
    BRAID_ROP_FN T braid_rop_##tag##_sum(T x, T y)                                                 \
    {                                                                                              \
        return (T)(U)(0u + (U)x + (U)y);                                                           \
    }                                                                                              \
    BRAID_ROP_FN T braid_rop_##tag##_prod(T x, T y)                                                \
    {                                                                                              \
        return (T)(U)(1u * (U)x * (U)y);                                                           \
    }                                                                                              \
    BRAID_ROP_FN T braid_rop_##tag##_min(T x, T y)                                                 \
    {                                                                                              \
        return x < y ? x : y;                                                                      \
    }                                                                                              \
    BRAID_ROP_FN T braid_rop_##tag##_max(T x, T y)                                                 \
    {                                                                                              \
        return x > y ? x : y;                                                                      \
    }                                                                                              \
    typedef W braid_rop_##tag##_dn_t;                                                              \
    BRAID_ROP_FN W braid_rop_##tag##_dn(int nranks)                                                \
    {                                                                                              \
        return (W)nranks;                                                                          \
    }                                                                                              \
    BRAID_ROP_FN T braid_rop_##tag##_avg(T x, T y, W dn)                                           \
    {                                                                                              \
        return (T)((W)braid_rop_##tag##_sum(x, y) / dn);                                           \
    }                                                                                              \
    BRAID_ROP_FN T braid_rop_##tag##_div(T x, W dn)                                                \
    {                                                                                              \
        return (T)((W)x / dn);                                                                     \
    }

BRAID_ROP_INT(i8, int8_t, uint8_t, int64_t)
BRAID_ROP_INT(u8, uint8_t, uint8_t, uint64_t)
BRAID_ROP_INT(i32, int32_t, uint32_t, int64_t)
BRAID_ROP_INT(u32, uint32_t, uint32_t, uint64_t)
BRAID_ROP_INT(i64, int64_t, uint64_t, int64_t)
BRAID_ROP_INT(u64, uint64_t, uint64_t, uint64_t)

#endif
