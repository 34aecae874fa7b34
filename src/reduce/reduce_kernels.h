/* Kernel template: every (dtype, op) kernel of one ISA variant, and its table.
 *
 * Included once per variant (no include guard, on purpose) by reduce.c (generic),
 * reduce_simd_avx2.c and reduce_simd_avx512.c. The includer defines first:
 *   REDUCE_ATTR         attributes of every kernel, e.g. __attribute__((target("avx2")))
 *   REDUCE_SFX(name)    name##_variant, so the variants' static kernels do not collide
 *   REDUCE_TABLE        the braid_reduce_table_t this file defines
 *   REDUCE_ISA_NAME     "generic", "avx2" or "avx512"
 * and optionally REDUCE_H2F_BLOCK(float *f, const braid_rop_f16_mem *h) and
 * REDUCE_F2H_BLOCK(braid_rop_f16_mem *h, const float *f), which convert BRAID_RK_HBLK float16
 * values with hardware instructions (F16C, AVX-512) bit-identically to braid_rop_h2f/f2h. Without
 * them the scalar conversions are used in loops the compiler may vectorize.
 *
 * The kernels are the loops of BRAID_RK_FOR over the element functions of reduce_ops.h; the
 * compiler vectorizes them for the variant's target. float16 goes through blocks of
 * BRAID_RK_HBLK float32 values held in L1: convert a and b, combine with the float32 element
 * function (vectorized), convert back. */

#ifndef REDUCE_H2F_BLOCK
static REDUCE_ATTR inline void REDUCE_SFX(h2f_block)(float *f, const braid_rop_f16_mem *h)
{
    BRAID_IVDEP
    for (size_t j = 0; j < BRAID_RK_HBLK; j++)
        f[j] = braid_rop_h2f(h[j]);
}
static REDUCE_ATTR inline void REDUCE_SFX(f2h_block)(braid_rop_f16_mem *h, const float *f)
{
    BRAID_IVDEP
    for (size_t j = 0; j < BRAID_RK_HBLK; j++)
        h[j] = braid_rop_f2h(f[j]);
}
#define REDUCE_H2F_BLOCK REDUCE_SFX(h2f_block)
#define REDUCE_F2H_BLOCK REDUCE_SFX(f2h_block)
#endif

/* dst[k] = braid_rop_<tag>_<op>(a[k], b[k]) */
#define REDUCE_DEF_PAIR(tag, T, opname)                                                            \
    static REDUCE_ATTR void REDUCE_SFX(tag##_##opname)(void *dst_, const void *a_, const void *b_, \
                                                       size_t n)                                   \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *a = a_;                                                       \
        const braid_rop_##tag##_mem *b = b_;                                                       \
        BRAID_RK_FOR(T, n, k, dst[k] = braid_rop_##tag##_##opname(a[k], b[k]));                    \
    }

/* dst[k] = (a[k] + b[k]) / nranks, and dst[k] = src[k] / nranks */
#define REDUCE_DEF_AVG_DIV(tag, T)                                                                 \
    static REDUCE_ATTR void REDUCE_SFX(tag##_avg)(void *dst_, const void *a_, const void *b_,      \
                                                  size_t n, int nranks)                            \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *a = a_;                                                       \
        const braid_rop_##tag##_mem *b = b_;                                                       \
        const braid_rop_##tag##_dn_t dn = braid_rop_##tag##_dn(nranks);                            \
        BRAID_RK_FOR(T, n, k, dst[k] = braid_rop_##tag##_avg(a[k], b[k], dn));                     \
    }                                                                                              \
    static REDUCE_ATTR void REDUCE_SFX(tag##_div)(void *dst_, const void *src_, size_t n,          \
                                                  int nranks)                                      \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *src = src_;                                                   \
        const braid_rop_##tag##_dn_t dn = braid_rop_##tag##_dn(nranks);                            \
        BRAID_RK_FOR(T, n, k, dst[k] = braid_rop_##tag##_div(src[k], dn));                         \
    }

/* dst[k] = braid_rop_<tag>_prod(src[k], scalar): PreMulSum's multiplication, the element
 * type's own product (so rounded once, NaN rules included). */
#define REDUCE_DEF_SCALE(tag, T)                                                                   \
    static REDUCE_ATTR void REDUCE_SFX(tag##_scale)(void *dst_, const void *src_, size_t n,        \
                                                    const void *scalar)                            \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *src = src_;                                                   \
        T s;                                                                                       \
        memcpy(&s, scalar, sizeof(s));                                                             \
        BRAID_RK_FOR(T, n, k, dst[k] = braid_rop_##tag##_prod(src[k], s));                         \
    }

/* dst[k] = braid_rop_<tag>_pre(src[k], 1 / nranks): BRAID_AVG's pre-scaling (floats only). */
#define REDUCE_DEF_PRESCALE(tag, T, factor)                                                        \
    static REDUCE_ATTR void REDUCE_SFX(tag##_prescale)(void *dst_, const void *src_, size_t n,     \
                                                       int nranks)                                 \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *src = src_;                                                   \
        const braid_rop_##tag##_pre_t s = factor(nranks);                                          \
        BRAID_RK_FOR(T, n, k, dst[k] = braid_rop_##tag##_pre(src[k], s));                          \
    }

REDUCE_DEF_PRESCALE(bf16, uint16_t, braid_rop_avg_factor_f32)
REDUCE_DEF_PRESCALE(f32, float, braid_rop_avg_factor_f32)
REDUCE_DEF_PRESCALE(f64, double, braid_rop_avg_factor_f64)
REDUCE_DEF_PRESCALE(e4m3, uint8_t, braid_rop_avg_factor_f32)
REDUCE_DEF_PRESCALE(e5m2, uint8_t, braid_rop_avg_factor_f32)

/* dst[k] = f(f(s[0][k], s[1][k]), s[2][k]) (ns 3) or f(f(f(s[0][k], s[1][k]), s[2][k]), s[3][k])
 * (ns 4), f = braid_rop_<tag>_<op>: the chain of pair kernels in one pass, so the sources stream
 * in together; each step rounds to the element type as the pair kernel's store would. */
#define REDUCE_DEF_MULTI(tag, T, opname)                                                           \
    static REDUCE_ATTR void REDUCE_SFX(tag##_##opname##_m)(void *dst_, const void *const *s_,      \
                                                           int ns, size_t n)                       \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *a = s_[0], *b = s_[1], *c = s_[2];                            \
        if (ns == 3) {                                                                             \
            BRAID_RK_FOR(T, n, k,                                                                  \
                         dst[k] = braid_rop_##tag##_##opname(                                      \
                             braid_rop_##tag##_##opname(a[k], b[k]), c[k]));                       \
            return;                                                                                \
        }                                                                                          \
        const braid_rop_##tag##_mem *d = s_[3];                                                    \
        BRAID_RK_FOR(                                                                              \
            T, n, k,                                                                               \
            dst[k] = braid_rop_##tag##_##opname(                                                   \
                braid_rop_##tag##_##opname(braid_rop_##tag##_##opname(a[k], b[k]), c[k]), d[k]));  \
    }

/* The same with BRAID_AVG's last step: sums, then braid_rop_<tag>_avg with the last source. */
#define REDUCE_DEF_MULTI_AVG(tag, T)                                                               \
    static REDUCE_ATTR void REDUCE_SFX(tag##_avg_m)(void *dst_, const void *const *s_, int ns,     \
                                                    size_t n, int nranks)                          \
    {                                                                                              \
        braid_rop_##tag##_mem *dst = dst_;                                                         \
        const braid_rop_##tag##_mem *a = s_[0], *b = s_[1], *c = s_[2];                            \
        const braid_rop_##tag##_dn_t dn = braid_rop_##tag##_dn(nranks);                            \
        if (ns == 3) {                                                                             \
            BRAID_RK_FOR(T, n, k,                                                                  \
                         dst[k] =                                                                  \
                             braid_rop_##tag##_avg(braid_rop_##tag##_sum(a[k], b[k]), c[k], dn));  \
            return;                                                                                \
        }                                                                                          \
        const braid_rop_##tag##_mem *d = s_[3];                                                    \
        BRAID_RK_FOR(                                                                              \
            T, n, k,                                                                               \
            dst[k] = braid_rop_##tag##_avg(                                                        \
                braid_rop_##tag##_sum(braid_rop_##tag##_sum(a[k], b[k]), c[k]), d[k], dn));        \
    }

#define REDUCE_DEF_DTYPE(tag, T)                                                                   \
    REDUCE_DEF_PAIR(tag, T, sum)                                                                   \
    REDUCE_DEF_PAIR(tag, T, prod)                                                                  \
    REDUCE_DEF_PAIR(tag, T, min)                                                                   \
    REDUCE_DEF_PAIR(tag, T, max)                                                                   \
    REDUCE_DEF_MULTI(tag, T, sum)                                                                  \
    REDUCE_DEF_MULTI(tag, T, prod)                                                                 \
    REDUCE_DEF_MULTI(tag, T, min)                                                                  \
    REDUCE_DEF_MULTI(tag, T, max)                                                                  \
    REDUCE_DEF_AVG_DIV(tag, T)                                                                     \
    REDUCE_DEF_MULTI_AVG(tag, T)                                                                   \
    REDUCE_DEF_SCALE(tag, T)

REDUCE_DEF_DTYPE(i8, int8_t)
REDUCE_DEF_DTYPE(u8, uint8_t)
REDUCE_DEF_DTYPE(i32, int32_t)
REDUCE_DEF_DTYPE(u32, uint32_t)
REDUCE_DEF_DTYPE(i64, int64_t)
REDUCE_DEF_DTYPE(u64, uint64_t)
REDUCE_DEF_DTYPE(bf16, uint16_t)
REDUCE_DEF_DTYPE(f32, float)
REDUCE_DEF_DTYPE(f64, double)
REDUCE_DEF_DTYPE(e4m3, uint8_t)
REDUCE_DEF_DTYPE(e5m2, uint8_t)

/* float16: FEXPR combines float32 values x and y (and may use dn). Whole blocks are converted
 * with REDUCE_H2F_BLOCK/REDUCE_F2H_BLOCK; all of a and b's block is read before dst's block is
 * written, so exact aliasing is safe. The tail uses the scalar conversions. */
#define REDUCE_F16_BODY(FEXPR)                                                                     \
    braid_rop_f16_mem *dst = dst_;                                                                 \
    const braid_rop_f16_mem *a = a_;                                                               \
    const braid_rop_f16_mem *b = b_;                                                               \
    size_t i = 0;                                                                                  \
    for (; i + BRAID_RK_HBLK <= n; i += BRAID_RK_HBLK) {                                           \
        float fa[BRAID_RK_HBLK], fb[BRAID_RK_HBLK];                                                \
        REDUCE_H2F_BLOCK(fa, a + i);                                                               \
        REDUCE_H2F_BLOCK(fb, b + i);                                                               \
        BRAID_IVDEP                                                                                \
        for (size_t j = 0; j < BRAID_RK_HBLK; j++) {                                               \
            const float x = fa[j], y = fb[j];                                                      \
            fa[j] = (FEXPR);                                                                       \
        }                                                                                          \
        REDUCE_F2H_BLOCK(dst + i, fa);                                                             \
    }                                                                                              \
    for (; i < n; i++) {                                                                           \
        const float x = braid_rop_h2f(a[i]), y = braid_rop_h2f(b[i]);                              \
        dst[i] = braid_rop_f2h(FEXPR);                                                             \
    }

#define REDUCE_DEF_F16_PAIR(opname)                                                                \
    static REDUCE_ATTR void REDUCE_SFX(f16_##opname)(void *dst_, const void *a_, const void *b_,   \
                                                     size_t n)                                     \
    {                                                                                              \
        REDUCE_F16_BODY(braid_rop_f32_##opname(x, y))                                              \
    }

REDUCE_DEF_F16_PAIR(sum)
REDUCE_DEF_F16_PAIR(prod)
REDUCE_DEF_F16_PAIR(min)
REDUCE_DEF_F16_PAIR(max)

/* float16 over ns sources: FSTEP combines float32 x and y for every step but the last, which
 * is FLAST; between steps the value is rounded to float16 and widened again, as the pair
 * kernels' stores round it. All sources' blocks are read before dst's is written. */
#define REDUCE_F16_MULTI_BODY(FSTEP, FLAST)                                                        \
    braid_rop_f16_mem *dst = dst_;                                                                 \
    size_t i = 0;                                                                                  \
    for (; i + BRAID_RK_HBLK <= n; i += BRAID_RK_HBLK) {                                           \
        float fa[BRAID_RK_HBLK], fb[BRAID_RK_HBLK];                                                \
        braid_rop_f16_mem hr[BRAID_RK_HBLK];                                                       \
        REDUCE_H2F_BLOCK(fa, (const braid_rop_f16_mem *)s_[0] + i);                                \
        for (int j = 1; j < ns; j++) {                                                             \
            REDUCE_H2F_BLOCK(fb, (const braid_rop_f16_mem *)s_[j] + i);                            \
            if (j == ns - 1) {                                                                     \
                BRAID_IVDEP                                                                        \
                for (size_t l = 0; l < BRAID_RK_HBLK; l++) {                                       \
                    const float x = fa[l], y = fb[l];                                              \
                    fa[l] = (FLAST);                                                               \
                }                                                                                  \
                break;                                                                             \
            }                                                                                      \
            BRAID_IVDEP                                                                            \
            for (size_t l = 0; l < BRAID_RK_HBLK; l++) {                                           \
                const float x = fa[l], y = fb[l];                                                  \
                fa[l] = (FSTEP);                                                                   \
            }                                                                                      \
            REDUCE_F2H_BLOCK(hr, fa);                                                              \
            REDUCE_H2F_BLOCK(fa, hr);                                                              \
        }                                                                                          \
        REDUCE_F2H_BLOCK(dst + i, fa);                                                             \
    }                                                                                              \
    for (; i < n; i++) {                                                                           \
        float x = braid_rop_h2f(((const braid_rop_f16_mem *)s_[0])[i]);                            \
        for (int j = 1; j < ns; j++) {                                                             \
            const float y = braid_rop_h2f(((const braid_rop_f16_mem *)s_[j])[i]);                  \
            x = j == ns - 1 ? (FLAST) : braid_rop_h2f(braid_rop_f2h(FSTEP));                       \
        }                                                                                          \
        dst[i] = braid_rop_f2h(x);                                                                 \
    }

#define REDUCE_DEF_F16_MULTI(opname)                                                               \
    static REDUCE_ATTR void REDUCE_SFX(f16_##opname##_m)(void *dst_, const void *const *s_,        \
                                                         int ns, size_t n)                         \
    {                                                                                              \
        REDUCE_F16_MULTI_BODY(braid_rop_f32_##opname(x, y), braid_rop_f32_##opname(x, y))          \
    }

REDUCE_DEF_F16_MULTI(sum)
REDUCE_DEF_F16_MULTI(prod)
REDUCE_DEF_F16_MULTI(min)
REDUCE_DEF_F16_MULTI(max)

static REDUCE_ATTR void REDUCE_SFX(f16_avg_m)(void *dst_, const void *const *s_, int ns, size_t n,
                                              int nranks)
{
    const float dn = (float)nranks;
    REDUCE_F16_MULTI_BODY(braid_rop_f32_sum(x, y), braid_rop_f32_avg(x, y, dn))
}

static REDUCE_ATTR void REDUCE_SFX(f16_avg)(void *dst_, const void *a_, const void *b_, size_t n,
                                            int nranks)
{
    const float dn = (float)nranks;
    REDUCE_F16_BODY(braid_rop_f32_avg(x, y, dn))
}

static REDUCE_ATTR void REDUCE_SFX(f16_scale)(void *dst_, const void *src_, size_t n,
                                              const void *scalar)
{
    const void *a_ = src_;
    const void *b_ = src_;
    uint16_t sh;
    memcpy(&sh, scalar, sizeof(sh));
    const float s = braid_rop_h2f(sh);
    REDUCE_F16_BODY(((void)y, braid_rop_f32_prod(x, s)))
}

static REDUCE_ATTR void REDUCE_SFX(f16_prescale)(void *dst_, const void *src_, size_t n, int nranks)
{
    /* as f16_scale, with the float32 factor of braid_rop_f16_pre */
    const void *a_ = src_;
    const void *b_ = src_;
    const float s = braid_rop_avg_factor_f32(nranks);
    REDUCE_F16_BODY(((void)y, braid_rop_f32_prod(x, s)))
}

static REDUCE_ATTR void REDUCE_SFX(f16_div)(void *dst_, const void *src_, size_t n, int nranks)
{
    /* The pair body with b = a and y unused: one conversion too many, but no second copy. */
    const void *a_ = src_;
    const void *b_ = src_;
    const float dn = (float)nranks;
    REDUCE_F16_BODY(((void)y, x / dn))
}

#define REDUCE_ROW_M(tag)                                                                          \
    {                                                                                              \
        REDUCE_SFX(tag##_sum_m), REDUCE_SFX(tag##_prod_m), REDUCE_SFX(tag##_min_m),                \
            REDUCE_SFX(tag##_max_m)                                                                \
    }

#define REDUCE_ROW(tag)                                                                            \
    {                                                                                              \
        REDUCE_SFX(tag##_sum), REDUCE_SFX(tag##_prod), REDUCE_SFX(tag##_min),                      \
            REDUCE_SFX(tag##_max)                                                                  \
    }

const braid_reduce_table_t REDUCE_TABLE = {
    .name = REDUCE_ISA_NAME,
    .pair =
        {
            [BRAID_INT8] = REDUCE_ROW(i8),
            [BRAID_UINT8] = REDUCE_ROW(u8),
            [BRAID_INT32] = REDUCE_ROW(i32),
            [BRAID_UINT32] = REDUCE_ROW(u32),
            [BRAID_INT64] = REDUCE_ROW(i64),
            [BRAID_UINT64] = REDUCE_ROW(u64),
            [BRAID_FLOAT16] = REDUCE_ROW(f16),
            [BRAID_BFLOAT16] = REDUCE_ROW(bf16),
            [BRAID_FLOAT32] = REDUCE_ROW(f32),
            [BRAID_FLOAT64] = REDUCE_ROW(f64),
            [BRAID_FLOAT8_E4M3] = REDUCE_ROW(e4m3),
            [BRAID_FLOAT8_E5M2] = REDUCE_ROW(e5m2),
        },
    .avg =
        {
            [BRAID_INT8] = REDUCE_SFX(i8_avg),
            [BRAID_UINT8] = REDUCE_SFX(u8_avg),
            [BRAID_INT32] = REDUCE_SFX(i32_avg),
            [BRAID_UINT32] = REDUCE_SFX(u32_avg),
            [BRAID_INT64] = REDUCE_SFX(i64_avg),
            [BRAID_UINT64] = REDUCE_SFX(u64_avg),
            [BRAID_FLOAT16] = REDUCE_SFX(f16_avg),
            [BRAID_BFLOAT16] = REDUCE_SFX(bf16_avg),
            [BRAID_FLOAT32] = REDUCE_SFX(f32_avg),
            [BRAID_FLOAT64] = REDUCE_SFX(f64_avg),
            [BRAID_FLOAT8_E4M3] = REDUCE_SFX(e4m3_avg),
            [BRAID_FLOAT8_E5M2] = REDUCE_SFX(e5m2_avg),
        },
    .multi =
        {
            [BRAID_INT8] = REDUCE_ROW_M(i8),
            [BRAID_UINT8] = REDUCE_ROW_M(u8),
            [BRAID_INT32] = REDUCE_ROW_M(i32),
            [BRAID_UINT32] = REDUCE_ROW_M(u32),
            [BRAID_INT64] = REDUCE_ROW_M(i64),
            [BRAID_UINT64] = REDUCE_ROW_M(u64),
            [BRAID_FLOAT16] = REDUCE_ROW_M(f16),
            [BRAID_BFLOAT16] = REDUCE_ROW_M(bf16),
            [BRAID_FLOAT32] = REDUCE_ROW_M(f32),
            [BRAID_FLOAT64] = REDUCE_ROW_M(f64),
            [BRAID_FLOAT8_E4M3] = REDUCE_ROW_M(e4m3),
            [BRAID_FLOAT8_E5M2] = REDUCE_ROW_M(e5m2),
        },
    .multi_avg =
        {
            [BRAID_INT8] = REDUCE_SFX(i8_avg_m),
            [BRAID_UINT8] = REDUCE_SFX(u8_avg_m),
            [BRAID_INT32] = REDUCE_SFX(i32_avg_m),
            [BRAID_UINT32] = REDUCE_SFX(u32_avg_m),
            [BRAID_INT64] = REDUCE_SFX(i64_avg_m),
            [BRAID_UINT64] = REDUCE_SFX(u64_avg_m),
            [BRAID_FLOAT16] = REDUCE_SFX(f16_avg_m),
            [BRAID_BFLOAT16] = REDUCE_SFX(bf16_avg_m),
            [BRAID_FLOAT32] = REDUCE_SFX(f32_avg_m),
            [BRAID_FLOAT64] = REDUCE_SFX(f64_avg_m),
            [BRAID_FLOAT8_E4M3] = REDUCE_SFX(e4m3_avg_m),
            [BRAID_FLOAT8_E5M2] = REDUCE_SFX(e5m2_avg_m),
        },
    .div =
        {
            [BRAID_INT8] = REDUCE_SFX(i8_div),
            [BRAID_UINT8] = REDUCE_SFX(u8_div),
            [BRAID_INT32] = REDUCE_SFX(i32_div),
            [BRAID_UINT32] = REDUCE_SFX(u32_div),
            [BRAID_INT64] = REDUCE_SFX(i64_div),
            [BRAID_UINT64] = REDUCE_SFX(u64_div),
            [BRAID_FLOAT16] = REDUCE_SFX(f16_div),
            [BRAID_BFLOAT16] = REDUCE_SFX(bf16_div),
            [BRAID_FLOAT32] = REDUCE_SFX(f32_div),
            [BRAID_FLOAT64] = REDUCE_SFX(f64_div),
            [BRAID_FLOAT8_E4M3] = REDUCE_SFX(e4m3_div),
            [BRAID_FLOAT8_E5M2] = REDUCE_SFX(e5m2_div),
        },
    .scale =
        {
            [BRAID_INT8] = REDUCE_SFX(i8_scale),
            [BRAID_UINT8] = REDUCE_SFX(u8_scale),
            [BRAID_INT32] = REDUCE_SFX(i32_scale),
            [BRAID_UINT32] = REDUCE_SFX(u32_scale),
            [BRAID_INT64] = REDUCE_SFX(i64_scale),
            [BRAID_UINT64] = REDUCE_SFX(u64_scale),
            [BRAID_FLOAT16] = REDUCE_SFX(f16_scale),
            [BRAID_BFLOAT16] = REDUCE_SFX(bf16_scale),
            [BRAID_FLOAT32] = REDUCE_SFX(f32_scale),
            [BRAID_FLOAT64] = REDUCE_SFX(f64_scale),
            [BRAID_FLOAT8_E4M3] = REDUCE_SFX(e4m3_scale),
            [BRAID_FLOAT8_E5M2] = REDUCE_SFX(e5m2_scale),
        },
    .prescale =
        {
            [BRAID_FLOAT16] = REDUCE_SFX(f16_prescale),
            [BRAID_BFLOAT16] = REDUCE_SFX(bf16_prescale),
            [BRAID_FLOAT32] = REDUCE_SFX(f32_prescale),
            [BRAID_FLOAT64] = REDUCE_SFX(f64_prescale),
            [BRAID_FLOAT8_E4M3] = REDUCE_SFX(e4m3_prescale),
            [BRAID_FLOAT8_E5M2] = REDUCE_SFX(e5m2_prescale),
        },
};

#undef REDUCE_DEF_PRESCALE
#undef REDUCE_DEF_PAIR
#undef REDUCE_DEF_AVG_DIV
#undef REDUCE_DEF_DTYPE
#undef REDUCE_DEF_SCALE
#undef REDUCE_F16_BODY
#undef REDUCE_DEF_F16_PAIR
#undef REDUCE_ROW
#undef REDUCE_ROW_M
#undef REDUCE_DEF_MULTI
#undef REDUCE_DEF_MULTI_AVG
#undef REDUCE_F16_MULTI_BODY
#undef REDUCE_DEF_F16_MULTI
#undef REDUCE_H2F_BLOCK
#undef REDUCE_F2H_BLOCK
