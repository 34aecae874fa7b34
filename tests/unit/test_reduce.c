/* Tests of the CPU reduction kernels (src/reduce) and the float16/bfloat16 conversions.
 *
 * Every result is checked bit for bit against a reference written here independently of
 * src/reduce/reduce_ops.h: integers by 64-bit arithmetic masked to the width, floats by double
 * arithmetic rounded with casts (double rounding is innocuous for + - * / of float32, and
 * float32 for float16/bfloat16), float16/bfloat16 encoded with frexp/ldexp/rint rather than bit
 * manipulation. Inputs depend on the index and a seed (never all ones), include NaN payloads,
 * infinities, zeros of both signs and subnormals, and buffers are misaligned by a fraction of an
 * element. The reduce/isa_* tests force each ISA path (BRAID_REDUCE_ISA, read lazily at the
 * first reduction of the process; Criterion runs each test in its own process) and
 * reduce/isa_bit_identical runs every path in a forked child and compares their bytes. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(reduce, .timeout = 60);

#include "cpu_isa.h"
#include "ref_reduce.h"

/* ---- the checker -------------------------------------------------------------------------- */

enum { AL_NONE, AL_DST_A, AL_DST_B, AL_ALL };
static const char *const alias_name[] = {"none", "dst=a", "dst=b", "dst=a=b"};
#define GUARD 32

/* Runs one kernel call (mode M_PAIR: braid_reduce_pair, M_FINAL: braid_reduce_pair_final,
 * M_DIV: braid_reduce_finalize with src = a) on buffers misaligned by off bytes, and checks
 * every element against ref_elem, the guard bytes around dst and unchanged inputs. */
static void check_call(braid_datatype_t dt, braid_redop_t op, int mode, size_t count, size_t off,
                       int alias, int nranks, uint64_t seed)
{
    size_t es = esize(dt), bytes = count * es;
    size_t sz = bytes + off + 2 * GUARD;
    unsigned char *A = malloc(sz), *B = malloc(sz), *D = malloc(sz);
    unsigned char *ca = malloc(bytes + 1), *cb = malloc(bytes + 1);
    cr_assert(A && B && D && ca && cb);
    memset(A, 0xa5, sz);
    memset(B, 0xa5, sz);
    memset(D, 0xa5, sz);
    unsigned char *a = A + GUARD + off, *b = B + GUARD + off, *d = D + GUARD + off;
    for (size_t i = 0; i < count; i++) {
        put_elem(dt, a, i, gen_bits(dt, i, seed, 0));
        put_elem(dt, b, i, gen_bits(dt, i, seed + 1, 0));
    }
    if (alias == AL_ALL) memcpy(b, a, bytes);
    memcpy(ca, a, bytes);
    memcpy(cb, alias == AL_ALL ? a : b, bytes);
    unsigned char *dst = d, *pa = a, *pb = b, *gbase = D;
    if (alias == AL_DST_A) dst = a, gbase = A;
    if (alias == AL_DST_B) dst = b, gbase = B;
    if (alias == AL_ALL) dst = pa = pb = a, gbase = A;

    if (mode == M_PAIR)
        braid_reduce_pair(dt, op, dst, pa, pb, count);
    else if (mode == M_FINAL)
        braid_reduce_pair_final(dt, op, dst, pa, pb, count, nranks);
    else
        braid_reduce_finalize(dt, op, dst, pa, count, nranks);

    static const char *const mname[] = {"pair", "pair_final", "finalize"};
    for (size_t i = 0; i < count; i++) {
        uint64_t x = get_elem(dt, ca, i), y = get_elem(dt, cb, i), got = get_elem(dt, dst, i);
        want_t w = ref_elem(dt, op, mode, x, y, nranks);
        if (!want_ok(dt, w, got))
            cr_assert_fail(
                "%s %s %s count=%zu off=%zu alias=%s nranks=%d: [%zu] = 0x%llx, want 0x%llx%s "
                "(a=0x%llx b=0x%llx, isa %s)",
                mname[mode], dtname(dt), opname(op), count, off, alias_name[alias], nranks, i,
                (unsigned long long)got, (unsigned long long)w.bits,
                w.any_nan ? " (any quiet NaN)" : "", (unsigned long long)x, (unsigned long long)y,
                braid_reduce_isa());
    }
    /* Nothing outside dst[0, count) was written; unaliased inputs are unchanged. */
    for (size_t k = 0; k < sz; k++) {
        unsigned char *p = gbase + k;
        if (p >= dst && p < dst + bytes) continue;
        cr_assert_eq(*p, 0xa5, "%s %s %s count=%zu: wrote byte %zd outside dst", mname[mode],
                     dtname(dt), opname(op), count, (ssize_t)(p - dst));
    }
    if (dst != a) cr_assert(memcmp(a, ca, bytes) == 0, "%s: input a modified", dtname(dt));
    if (dst != b && alias != AL_ALL)
        cr_assert(memcmp(b, cb, bytes) == 0, "%s: input b modified", dtname(dt));
    free(A);
    free(B);
    free(D);
    free(ca);
    free(cb);
}

static const size_t small_counts[] = {1, 7, 33, 63, 64, 65, 127, 128, 129, 200, 1000, 4099};
#define NSMALL (sizeof(small_counts) / sizeof(small_counts[0]))

/* Every op, small counts x offsets x aliasing, then a large count. */
static void check_dtype(braid_datatype_t dt, size_t big)
{
    static const size_t offs[] = {0, 1, 3}; /* bytes past malloc's alignment */
    for (size_t o = 0; o < NOPS; o++) {
        braid_redop_t op = all_ops[o];
        for (size_t c = 0; c < NSMALL; c++)
            for (int al = AL_NONE; al <= AL_ALL; al++)
                for (size_t f = 0; f < 3; f++)
                    check_call(dt, op, M_PAIR, small_counts[c], offs[f], al, 1, 11 * c + al);
        check_call(dt, op, M_PAIR, big, 0, AL_NONE, 1, 1000 + o);
        check_call(dt, op, M_PAIR, big, 1, AL_DST_A, 1, 2000 + o);
    }
}

#define DTYPE_TEST(name, dt)                                                                       \
    Test(reduce, pair_##name)                                                                      \
    {                                                                                              \
        check_dtype(dt, 1000003);                                                                  \
    }
DTYPE_TEST(int8, BRAID_INT8)
DTYPE_TEST(uint8, BRAID_UINT8)
DTYPE_TEST(int32, BRAID_INT32)
DTYPE_TEST(uint32, BRAID_UINT32)
DTYPE_TEST(int64, BRAID_INT64)
DTYPE_TEST(uint64, BRAID_UINT64)
DTYPE_TEST(float16, BRAID_FLOAT16)
DTYPE_TEST(bfloat16, BRAID_BFLOAT16)
DTYPE_TEST(float32, BRAID_FLOAT32)
DTYPE_TEST(float64, BRAID_FLOAT64)
DTYPE_TEST(float8_e4m3, BRAID_FLOAT8_E4M3)
DTYPE_TEST(float8_e5m2, BRAID_FLOAT8_E5M2)

Test(reduce, count_zero_touches_nothing)
{
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t o = 0; o < NOPS; o++) {
            braid_reduce_pair(all_dtypes[d], all_ops[o], NULL, NULL, NULL, 0);
            braid_reduce_pair_final(all_dtypes[d], all_ops[o], NULL, NULL, NULL, 0, 4);
            braid_reduce_finalize(all_dtypes[d], all_ops[o], NULL, NULL, 0, 4);
        }
}

Test(reduce, pair_final_and_finalize)
{
    static const int nr[] = {1, 2, 3, 4, 5, 6, 7, 8, 200, 1000};
    for (size_t d = 0; d < NDTYPES; d++)
        for (size_t o = 0; o < NOPS; o++)
            for (size_t n = 0; n < sizeof(nr) / sizeof(nr[0]); n++) {
                uint64_t seed = 100 * d + 10 * o + n;
                check_call(all_dtypes[d], all_ops[o], M_FINAL, 1000, 0, AL_NONE, nr[n], seed);
                check_call(all_dtypes[d], all_ops[o], M_FINAL, 33, 1, AL_DST_B, nr[n], seed);
                check_call(all_dtypes[d], all_ops[o], M_FINAL, 129, 0, AL_DST_A, nr[n], seed);
                check_call(all_dtypes[d], all_ops[o], M_DIV, 1000, 1, AL_NONE, nr[n], seed);
                check_call(all_dtypes[d], all_ops[o], M_DIV, 65, 0, AL_DST_A, nr[n], seed);
            }
}

/* The ring's sequence on one element: pair over ranks 0..n-2, pair_final with the last. */
Test(reduce, chain_like_a_ring)
{
    const size_t count = 1001;
    for (size_t d = 0; d < NDTYPES; d++) {
        braid_datatype_t dt = all_dtypes[d];
        size_t es = esize(dt);
        for (size_t o = 0; o < NOPS; o++)
            for (int n = 2; n <= 8; n++) {
                unsigned char *acc = malloc(count * es), *in = malloc(count * es);
                cr_assert(acc && in);
                for (size_t i = 0; i < count; i++)
                    put_elem(dt, acc, i, gen_bits(dt, i, 7, 0));
                for (int r = 1; r < n; r++) {
                    for (size_t i = 0; i < count; i++)
                        put_elem(dt, in, i, gen_bits(dt, i, 7 + (uint64_t)r, 0));
                    uint64_t *want = malloc(count * sizeof(*want));
                    int *anyn = malloc(count * sizeof(*anyn));
                    int mode = r == n - 1 ? M_FINAL : M_PAIR;
                    for (size_t i = 0; i < count; i++) {
                        want_t w = ref_elem(dt, all_ops[o], mode, get_elem(dt, acc, i),
                                            get_elem(dt, in, i), n);
                        want[i] = w.bits;
                        anyn[i] = w.any_nan;
                    }
                    if (mode == M_FINAL)
                        braid_reduce_pair_final(dt, all_ops[o], acc, acc, in, count, n);
                    else
                        braid_reduce_pair(dt, all_ops[o], acc, acc, in, count);
                    for (size_t i = 0; i < count; i++) {
                        want_t w = {want[i], anyn[i]};
                        cr_assert(want_ok(dt, w, get_elem(dt, acc, i)),
                                  "chain %s %s n=%d step %d [%zu] = 0x%llx want 0x%llx", dtname(dt),
                                  opname(all_ops[o]), n, r, i,
                                  (unsigned long long)get_elem(dt, acc, i),
                                  (unsigned long long)want[i]);
                        /* Keep a generated NaN from making the next step's want ambiguous. */
                        if (anyn[i]) put_elem(dt, acc, i, gen_bits(dt, i, 99, 0));
                    }
                    free(want);
                    free(anyn);
                }
                free(acc);
                free(in);
            }
    }
}

Test(reduce, integer_wraparound)
{
    int8_t i8a[] = {127, -128, -128, 100, -1}, i8b[] = {1, -1, -1, 100, -1}, i8r[5];
    braid_reduce_pair(BRAID_INT8, BRAID_SUM, i8r, i8a, i8b, 5);
    cr_assert(i8r[0] == -128 && i8r[1] == 127 && i8r[3] == -56 && i8r[4] == -2);
    braid_reduce_pair(BRAID_INT8, BRAID_PROD, i8r, i8a, i8b, 5);
    cr_assert(i8r[0] == 127 && i8r[1] == -128 && i8r[3] == 16 && i8r[4] == 1);
    braid_reduce_pair_final(BRAID_INT8, BRAID_AVG, i8r, i8a, i8b, 5, 3);
    cr_assert(i8r[0] == -42 && i8r[1] == 42 && i8r[3] == -18, "int8 avg %d %d %d", i8r[0], i8r[1],
              i8r[3]);
    braid_reduce_pair_final(BRAID_INT8, BRAID_AVG, i8r, i8a, i8b, 5, 200); /* nranks > 127 */
    cr_assert(i8r[0] == 0 && i8r[4] == 0);

    uint8_t u8a[] = {255, 200, 16}, u8b[] = {1, 100, 16}, u8r[3];
    braid_reduce_pair(BRAID_UINT8, BRAID_SUM, u8r, u8a, u8b, 3);
    cr_assert(u8r[0] == 0 && u8r[1] == 44 && u8r[2] == 32);
    braid_reduce_pair(BRAID_UINT8, BRAID_PROD, u8r, u8a, u8b, 3);
    cr_assert(u8r[0] == 255 && u8r[1] == (uint8_t)20000 && u8r[2] == 0);

    int32_t i32a[] = {INT32_MAX, INT32_MIN, 65536}, i32b[] = {1, -1, 65536}, i32r[3];
    braid_reduce_pair(BRAID_INT32, BRAID_SUM, i32r, i32a, i32b, 3);
    cr_assert(i32r[0] == INT32_MIN && i32r[1] == INT32_MAX && i32r[2] == 131072);
    braid_reduce_pair(BRAID_INT32, BRAID_PROD, i32r, i32a, i32b, 3);
    cr_assert(i32r[0] == INT32_MAX && i32r[1] == INT32_MIN && i32r[2] == 0);
    braid_reduce_pair_final(BRAID_INT32, BRAID_AVG, i32r, i32a, i32b, 3, 2);
    cr_assert(i32r[0] == INT32_MIN / 2 && i32r[1] == INT32_MAX / 2);

    int64_t i64a[] = {INT64_MAX, INT64_MIN, INT64_MIN}, i64b[] = {1, -1, INT64_MIN}, i64r[3];
    braid_reduce_pair(BRAID_INT64, BRAID_SUM, i64r, i64a, i64b, 3);
    cr_assert(i64r[0] == INT64_MIN && i64r[1] == INT64_MAX && i64r[2] == 0);
    braid_reduce_pair(BRAID_INT64, BRAID_PROD, i64r, i64a, i64b, 3);
    cr_assert(i64r[0] == INT64_MAX && i64r[1] == INT64_MIN && i64r[2] == 0);
    braid_reduce_finalize(BRAID_INT64, BRAID_AVG, i64r, i64a, 3, 7);
    cr_assert(i64r[0] == INT64_MAX / 7 && i64r[1] == INT64_MIN / 7);

    uint64_t u64a[] = {UINT64_MAX, UINT64_MAX}, u64b[] = {1, UINT64_MAX}, u64r[2];
    braid_reduce_pair(BRAID_UINT64, BRAID_SUM, u64r, u64a, u64b, 2);
    cr_assert(u64r[0] == 0 && u64r[1] == UINT64_MAX - 1);
    braid_reduce_pair(BRAID_UINT64, BRAID_PROD, u64r, u64a, u64b, 2);
    cr_assert(u64r[0] == UINT64_MAX && u64r[1] == 1);
    uint32_t u32a[] = {UINT32_MAX, 7}, u32b[] = {UINT32_MAX, 3}, u32r[2];
    braid_reduce_pair(BRAID_UINT32, BRAID_MIN, u32r, u32a, u32b, 2);
    cr_assert(u32r[0] == UINT32_MAX && u32r[1] == 3);
    braid_reduce_pair_final(BRAID_UINT32, BRAID_AVG, u32r, u32a, u32b, 2, 4);
    cr_assert(u32r[0] == (uint32_t)(UINT32_MAX - 1) / 4 && u32r[1] == 2);
}

/* Explicit IEEE cases on float32; the same values through float64, float16 and bfloat16. */
Test(reduce, float_specials)
{
    const float inf = INFINITY, qn = bits2f(0x7fc00001u), qn2 = bits2f(0xffc00abcu);
    const float sn = bits2f(0x7fa00000u); /* signaling, payload survives narrowing */
    struct {
        float x, y;
        uint32_t sum, prod, min, max;
    } cases[] = {
        {-0.0f, 0.0f, 0x00000000u, 0x80000000u, 0x80000000u, 0x00000000u},
        {0.0f, -0.0f, 0x00000000u, 0x80000000u, 0x80000000u, 0x00000000u},
        {-0.0f, -0.0f, 0x80000000u, 0x00000000u, 0x80000000u, 0x80000000u},
        {inf, 1.0f, 0x7f800000u, 0x7f800000u, 0x3f800000u, 0x7f800000u},
        {-inf, inf, 0xffc00000u /*any*/, 0xff800000u, 0xff800000u, 0x7f800000u},
        {qn, 1.0f, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u},
        {1.0f, qn, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u},
        {qn, qn2, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u},
        {qn2, qn, 0xffc00abcu, 0xffc00abcu, 0xffc00abcu, 0xffc00abcu},
        {sn, 2.0f, 0x7fe00000u, 0x7fe00000u, 0x7fe00000u, 0x7fe00000u},
        {-inf, qn, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u, 0x7fc00001u},
        {0.0f, inf, 0x7f800000u, 0xffc00000u /*any*/, 0x00000000u, 0x7f800000u},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    static const braid_redop_t ops[] = {BRAID_SUM, BRAID_PROD, BRAID_MIN, BRAID_MAX};
    for (size_t o = 0; o < 4; o++) {
        float xs[16], ys[16], rs[16];
        for (size_t i = 0; i < n; i++)
            xs[i] = cases[i].x, ys[i] = cases[i].y;
        braid_reduce_pair(BRAID_FLOAT32, ops[o], rs, xs, ys, n);
        for (size_t i = 0; i < n; i++) {
            uint32_t want = o == 0   ? cases[i].sum
                            : o == 1 ? cases[i].prod
                            : o == 2 ? cases[i].min
                                     : cases[i].max;
            uint32_t got = f2bits(rs[i]);
            if (want == 0xffc00000u)
                cr_assert(isnan(rs[i]), "f32 %s case %zu: want NaN", opname(ops[o]), i);
            else
                cr_assert_eq(got, want, "f32 %s case %zu: 0x%08x want 0x%08x", opname(ops[o]), i,
                             got, want);
        }
        /* float64, float16, bfloat16 agree with the reference on the same values. */
        for (int dti = 0; dti < 3; dti++) {
            braid_datatype_t dt = dti == 0   ? BRAID_FLOAT64
                                  : dti == 1 ? BRAID_FLOAT16
                                             : BRAID_BFLOAT16;
            uint64_t xb[16], yb[16];
            unsigned char xbuf[128], ybuf[128], rbuf[128];
            for (size_t i = 0; i < n; i++) {
                if (dt == BRAID_FLOAT64) {
                    /* widen keeping the NaN payload bits at the top of the significand */
                    uint32_t ux = f2bits(xs[i]), uy = f2bits(ys[i]);
                    xb[i] = isnan(xs[i]) ? ((uint64_t)(ux >> 31) << 63 | 0x7ff0000000000000ull |
                                            (uint64_t)(ux & 0x7fffff) << 29)
                                         : d2bits(xs[i]);
                    yb[i] = isnan(ys[i]) ? ((uint64_t)(uy >> 31) << 63 | 0x7ff0000000000000ull |
                                            (uint64_t)(uy & 0x7fffff) << 29)
                                         : d2bits(ys[i]);
                } else if (dt == BRAID_FLOAT16) {
                    xb[i] = braid_float_to_half(xs[i]);
                    yb[i] = braid_float_to_half(ys[i]);
                } else {
                    xb[i] = braid_float_to_bf16(xs[i]);
                    yb[i] = braid_float_to_bf16(ys[i]);
                }
                put_elem(dt, xbuf, i, xb[i]);
                put_elem(dt, ybuf, i, yb[i]);
            }
            braid_reduce_pair(dt, ops[o], rbuf, xbuf, ybuf, n);
            for (size_t i = 0; i < n; i++) {
                want_t w = ref_elem(dt, ops[o], M_PAIR, xb[i], yb[i], 1);
                cr_assert(want_ok(dt, w, get_elem(dt, rbuf, i)),
                          "%s %s case %zu: 0x%llx want 0x%llx", dtname(dt), opname(ops[o]), i,
                          (unsigned long long)get_elem(dt, rbuf, i), (unsigned long long)w.bits);
            }
        }
    }
    /* float16: overflow of a sum to inf, subnormal products, a tie rounded to even. */
    uint16_t ha[] = {0x7bff, 0x0400, 0x3c00, 0x0001}, hb[] = {0x5000, 0x3800, 0x1000, 0x3800},
             hr[4];
    braid_reduce_pair(BRAID_FLOAT16, BRAID_SUM, hr, ha, hb, 4);
    cr_assert(hr[0] == 0x7c00 && hr[2] == 0x3c00, "f16 sum 0x%04x 0x%04x", hr[0], hr[2]);
    braid_reduce_pair(BRAID_FLOAT16, BRAID_PROD, hr, ha, hb, 4);
    cr_assert(hr[1] == 0x0200 && hr[3] == 0x0000, "f16 prod 0x%04x 0x%04x", hr[1], hr[3]);
}

/* ---- ISA paths ---------------------------------------------------------------------------- */

static const char *cpu_best(void)
{
    return cpu_has("avx512") ? "avx512" : cpu_has("avx2") ? "avx2" : "generic";
}

static void check_isa(const char *isa)
{
    if (!cpu_has(isa)) cr_skip_test("this CPU has no %s", isa);
    setenv("BRAID_REDUCE_ISA", isa, 1);
    cr_assert_str_eq(braid_reduce_isa(), isa, "the dispatcher did not pick the forced path");
    for (size_t d = 0; d < NDTYPES; d++) {
        braid_datatype_t dt = all_dtypes[d];
        for (size_t o = 0; o < NOPS; o++) {
            for (size_t c = 0; c < NSMALL; c += 2)
                for (int al = AL_NONE; al <= AL_ALL; al++)
                    check_call(dt, all_ops[o], M_PAIR, small_counts[c], al & 1, al, 1, c + o);
            check_call(dt, all_ops[o], M_PAIR, 100003, 1, AL_NONE, 1, 77);
            check_call(dt, all_ops[o], M_FINAL, 4099, 0, AL_DST_A, 1 + (int)(o + d) % 8, 78);
            check_call(dt, all_ops[o], M_DIV, 4099, 1, AL_NONE, 1 + (int)(o + d) % 8, 79);
        }
    }
}

Test(reduce, isa_generic)
{
    check_isa("generic");
}

Test(reduce, isa_avx2)
{
    check_isa("avx2");
}

Test(reduce, isa_avx512)
{
    check_isa("avx512");
}

Test(reduce, isa_default_and_invalid)
{
    setenv("BRAID_REDUCE_ISA", "sse9", 1); /* warns and uses the best the CPU has */
    cr_assert_str_eq(braid_reduce_isa(), cpu_best());
}

/* Every path runs in its own forked child (the dispatcher chooses once per process) on
 * arbitrary bit patterns (every float16/bfloat16 pattern, NaN pairs with different payloads),
 * misaligned and aliased; the outputs must be byte-identical to the generic path's. */
#define BI_N 66001
enum { BI_SUM, BI_PROD, BI_MIN, BI_MAX, BI_AVG, BI_DIV, BI_KINDS };

static size_t bi_region(braid_datatype_t dt)
{
    return BI_N * esize(dt) + 16;
}

static size_t bi_total(void)
{
    size_t t = 0;
    for (size_t d = 0; d < NDTYPES; d++)
        t += BI_KINDS * bi_region(all_dtypes[d]);
    return t;
}

static void bi_run(unsigned char *out)
{
    for (size_t d = 0; d < NDTYPES; d++) {
        braid_datatype_t dt = all_dtypes[d];
        size_t es = esize(dt), reg = bi_region(dt), bytes = BI_N * es;
        unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
        for (size_t i = 0; i < BI_N; i++) {
            uint64_t x = gen_bits(dt, i, 5, i & 1), y = gen_bits(dt, i, 6, (i >> 1) & 1);
            if (es == 2) x = i & 0xffff; /* every pattern against random partners */
            if (is_fp8(dt)) x = i & 0xff;
            if (i % 13 == 0) y = x ^ 1; /* NaN with NaN of another payload, near ties */
            put_elem(dt, a + 1, i, x);
            put_elem(dt, b + 1, i, y);
        }
        for (int k = 0; k < BI_KINDS; k++, out += reg) {
            unsigned char *r = out + 1; /* misaligned for every wide type */
            switch (k) {
            case BI_SUM:
                braid_reduce_pair(dt, BRAID_SUM, r, a + 1, b + 1, BI_N);
                break;
            case BI_PROD: /* dst == a */
                memcpy(r, a + 1, bytes);
                braid_reduce_pair(dt, BRAID_PROD, r, r, b + 1, BI_N);
                break;
            case BI_MIN: /* dst == b */
                memcpy(r, b + 1, bytes);
                braid_reduce_pair(dt, BRAID_MIN, r, a + 1, r, BI_N);
                break;
            case BI_MAX:
                braid_reduce_pair(dt, BRAID_MAX, r, a + 1, b + 1, BI_N);
                break;
            case BI_AVG:
                braid_reduce_pair_final(dt, BRAID_AVG, r, a + 1, b + 1, BI_N, 3 + (int)d);
                break;
            default:
                memcpy(r, a + 1, bytes);
                braid_reduce_finalize(dt, BRAID_AVG, r, r, BI_N, 7);
                break;
            }
        }
        free(a);
        free(b);
    }
}

Test(reduce, isa_bit_identical, .timeout = 120)
{
    static const char *const isas[] = {"generic", "avx2", "avx512"};
    size_t total = bi_total();
    unsigned char *shm =
        mmap(NULL, 3 * (total + 64), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(shm != MAP_FAILED);
    int ran[3] = {0};
    for (int k = 0; k < 3; k++) {
        if (!cpu_has(isas[k])) continue;
        unsigned char *base = shm + k * (total + 64);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
            setenv("BRAID_REDUCE_ISA", isas[k], 1);
            bi_run(base + 64);
            snprintf((char *)base, 64, "%s", braid_reduce_isa());
            _exit(0);
        }
        int st = 0;
        cr_assert(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the %s child failed (status 0x%x)", isas[k], st);
        cr_assert_str_eq((char *)base, isas[k]);
        ran[k] = 1;
    }
    cr_assert(ran[0]);
    static const char *const kname[] = {"sum", "prod(dst=a)", "min(dst=b)",
                                        "max", "avg final",   "finalize avg"};
    for (int k = 1; k < 3; k++) {
        if (!ran[k]) continue;
        unsigned char *g = shm + 64, *v = shm + k * (total + 64) + 64;
        for (size_t d = 0; d < NDTYPES; d++) {
            braid_datatype_t dt = all_dtypes[d];
            size_t reg = bi_region(dt);
            for (int kind = 0; kind < BI_KINDS; kind++, g += reg, v += reg) {
                if (memcmp(g, v, reg) == 0) continue;
                for (size_t i = 0; i < BI_N; i++) {
                    uint64_t eg = get_elem(dt, g + 1, i), ev = get_elem(dt, v + 1, i);
                    cr_assert_eq(eg, ev, "%s %s %s [%zu]: 0x%llx, generic 0x%llx", isas[k],
                                 dtname(dt), kname[kind], i, (unsigned long long)ev,
                                 (unsigned long long)eg);
                }
                cr_assert_fail("%s %s %s: padding differs", isas[k], dtname(dt), kname[kind]);
            }
        }
    }
    munmap(shm, 3 * (total + 64));
}
