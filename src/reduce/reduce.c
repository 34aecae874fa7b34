/* CPU reduction kernels: the entry points of reduce.h, the ISA dispatcher and the generic
 * (baseline ISA) kernel variant.
 *
 * Three variants of every kernel are compiled from one template (reduce_kernels.h) over the
 * element functions of reduce_ops.h: "generic" (this file, baseline flags: SSE2 on x86-64),
 * "avx2" (reduce_simd_avx2.c, AVX2 + F16C) and "avx512" (reduce_simd_avx512.c, AVX-512
 * F/BW/VL). The dispatcher picks one on the first call in the process: the best the CPU
 * supports, or the one BRAID_REDUCE_ISA=generic|avx2|avx512 names (lowered to what the CPU
 * supports, with a warning). The choice is made lazily, so a test that sets the variable
 * before its first reduction (Criterion runs each test in its own process) gets that path.
 * All variants give bit-identical results; tests/unit/test_reduce.c checks it.
 *
 * Even the generic variant vectorizes (GCC 12 -O2, objdump -d): its float32 sum loop is
 * movups, cmpeqps/andps/andnps/orps (the NaN select), addps on xmm registers.
 * BRAID_REDUCE_ISA is read with braid_param_str (src/core/config.c's table should list it). */
#include "reduce/reduce.h"
#include "reduce/reduce_ops.h"

#include "core/config.h"
#include "core/log.h"

#if BRAID_REDUCE_X86
#include <cpuid.h>
#endif
#include <pthread.h>
#include <string.h>
#include <strings.h>

/* ---- the generic variant ----------------------------------------------------------------- */

#define REDUCE_ATTR
#define REDUCE_SFX(name) name##_generic
#define REDUCE_TABLE braid_reduce_table_generic
#define REDUCE_ISA_NAME "generic"
#include "reduce/reduce_kernels.h"
#undef REDUCE_ATTR
#undef REDUCE_SFX
#undef REDUCE_TABLE
#undef REDUCE_ISA_NAME

/* ---- dispatch ---------------------------------------------------------------------------- */

static const braid_reduce_table_t *braid_reduce_tab = &braid_reduce_table_generic;
static pthread_once_t braid_reduce_once = PTHREAD_ONCE_INIT;

enum { ISA_GENERIC, ISA_AVX2, ISA_AVX512 };

#if BRAID_REDUCE_X86
/* F16C (CPUID.1:ECX bit 29); not every compiler's __builtin_cpu_supports knows "f16c". */
static int braid_reduce_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

/* __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 state (XCR0). */
static int braid_reduce_cpu_best(void)
{
#if BRAID_REDUCE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && braid_reduce_has_f16c()) return ISA_AVX2;
#endif
    return ISA_GENERIC;
}

static void braid_reduce_choose(void)
{
    static const char *const names[] = {"generic", "avx2", "avx512"};
    int best = braid_reduce_cpu_best();
    int isa = best;
    const char *want = braid_param_str("REDUCE_ISA");
    if (want[0] != '\0' && strcasecmp(want, "auto") != 0) {
        int req = -1;
        for (int i = 0; i < 3; i++)
            if (strcasecmp(want, names[i]) == 0) req = i;
        if (req < 0) {
            braid_warn(ENV, "BRAID_REDUCE_ISA='%s' is not generic, avx2, avx512 or auto; using %s",
                       want, names[best]);
        } else if (req > best) {
            braid_warn(ENV, "BRAID_REDUCE_ISA=%s: this CPU does not support it; using %s", want,
                       names[best]);
        } else {
            isa = req;
        }
    }
#if BRAID_REDUCE_X86
    if (isa == ISA_AVX512)
        braid_reduce_tab = &braid_reduce_table_avx512;
    else if (isa == ISA_AVX2)
        braid_reduce_tab = &braid_reduce_table_avx2;
    else
        braid_reduce_tab = &braid_reduce_table_generic;
#else
    braid_reduce_tab = &braid_reduce_table_generic;
#endif
    braid_debug(COLL, "cpu reduction kernels: %s", braid_reduce_tab->name);
}

static const braid_reduce_table_t *braid_reduce_table(void)
{
    pthread_once(&braid_reduce_once, braid_reduce_choose);
    return braid_reduce_tab;
}

const char *braid_reduce_isa(void)
{
    return braid_reduce_table()->name;
}

/* ---- entry points ------------------------------------------------------------------------ */

static const unsigned char braid_reduce_esize[BRAID_NUM_DTYPES] = {
    [BRAID_INT8] = 1,    [BRAID_UINT8] = 1,   [BRAID_INT32] = 4,       [BRAID_UINT32] = 4,
    [BRAID_INT64] = 8,   [BRAID_UINT64] = 8,  [BRAID_FLOAT16] = 2,     [BRAID_BFLOAT16] = 2,
    [BRAID_FLOAT32] = 4, [BRAID_FLOAT64] = 8, [BRAID_FLOAT8_E4M3] = 1, [BRAID_FLOAT8_E5M2] = 1,
};

/* Callers have validated dtype and op; a bad one here is a bug in braid. */
static int braid_reduce_args_ok(braid_datatype_t dtype, braid_redop_t op)
{
    if ((unsigned)dtype < BRAID_NUM_DTYPES && (unsigned)op < BRAID_NUM_OPS) return 1;
    braid_warn(COLL, "internal error: reduction with invalid dtype %d or op %d", (int)dtype,
               (int)op);
    return 0;
}

static int braid_reduce_nranks(int nranks)
{
    if (nranks >= 1) return nranks;
    braid_warn(COLL, "internal error: avg over %d ranks (using 1)", nranks);
    return 1;
}

void braid_reduce_pair(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *a,
                       const void *b, size_t count)
{
    if (count == 0 || !braid_reduce_args_ok(dtype, op)) return;
    int rop = op == BRAID_AVG ? BRAID_ROP_SUM : (int)op;
    braid_reduce_table()->pair[dtype][rop](dst, a, b, count);
}

void braid_reduce_pair_final(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *a,
                             const void *b, size_t count, int nranks)
{
    if (count == 0 || !braid_reduce_args_ok(dtype, op)) return;
    if (op == BRAID_AVG)
        braid_reduce_table()->avg[dtype](dst, a, b, count, braid_reduce_nranks(nranks));
    else
        braid_reduce_table()->pair[dtype][op](dst, a, b, count);
}

void braid_reduce_many(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *const *src,
                       int ns, size_t count, int nranks)
{
    if (count == 0 || ns < 1 || !braid_reduce_args_ok(dtype, op)) return;
    if (ns == 1) {
        if (nranks > 0)
            braid_reduce_finalize(dtype, op, dst, src[0], count, nranks);
        else if (dst != src[0])
            memmove(dst, src[0], count * braid_reduce_esize[dtype]);
        return;
    }
    const braid_reduce_table_t *t = braid_reduce_table();
    int rop = op == BRAID_AVG ? BRAID_ROP_SUM : (int)op;
    /* Each pass combines what dst holds (src[0] at first) with up to three more sources. */
    for (int done = 0; done < ns - 1;) {
        const void *s[4];
        int k = 0, take = ns - 1 - done < 3 ? ns - 1 - done : 3;
        s[k++] = done == 0 ? src[0] : dst;
        for (int j = 1; j <= take; j++)
            s[k++] = src[done + j];
        done += take;
        int avg = op == BRAID_AVG && nranks > 0 && done == ns - 1;
        if (k == 2 && avg)
            t->avg[dtype](dst, s[0], s[1], count, braid_reduce_nranks(nranks));
        else if (k == 2)
            t->pair[dtype][rop](dst, s[0], s[1], count);
        else if (avg)
            t->multi_avg[dtype](dst, s, k, count, braid_reduce_nranks(nranks));
        else
            t->multi[dtype][rop](dst, s, k, count);
    }
}

void braid_reduce_finalize(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *src,
                           size_t count, int nranks)
{
    if (count == 0 || !braid_reduce_args_ok(dtype, op)) return;
    if (op == BRAID_AVG)
        braid_reduce_table()->div[dtype](dst, src, count, braid_reduce_nranks(nranks));
    else if (dst != src)
        memmove(dst, src, count * braid_reduce_esize[dtype]);
}

void braid_reduce_scale(braid_datatype_t dtype, void *dst, const void *src, size_t count,
                        const void *scalar)
{
    if (count == 0 || !braid_reduce_args_ok(dtype, BRAID_SUM)) return;
    braid_reduce_table()->scale[dtype](dst, src, count, scalar);
}

int braid_reduce_avg_prescales(braid_datatype_t dtype)
{
    return dtype == BRAID_FLOAT16 || dtype == BRAID_BFLOAT16 || dtype == BRAID_FLOAT8_E4M3 ||
           dtype == BRAID_FLOAT8_E5M2;
}

void braid_reduce_avg_prescale(braid_datatype_t dtype, void *dst, const void *src, size_t count,
                               int nranks)
{
    if (count == 0 || !braid_reduce_args_ok(dtype, BRAID_AVG)) return;
    if (dtype < BRAID_FLOAT16) {
        braid_warn(COLL, "internal error: avg pre-scaling of %s", braid_dtype_name(dtype));
        return;
    }
    braid_reduce_table()->prescale[dtype](dst, src, count, braid_reduce_nranks(nranks));
}

/* ---- scalar conversions ------------------------------------------------------------------ */

float braid_half_to_float(uint16_t h)
{
    return braid_rop_h2f(h);
}

uint16_t braid_float_to_half(float f)
{
    return braid_rop_f2h(f);
}

float braid_bf16_to_float(uint16_t b)
{
    return braid_rop_bf2f(b);
}

uint16_t braid_float_to_bf16(float f)
{
    return braid_rop_f2bf(f);
}

float braid_e4m3_to_float(uint8_t b)
{
    return braid_rop_e4m32f(b);
}

uint8_t braid_float_to_e4m3(float f)
{
    return braid_rop_f2e4m3(f);
}

float braid_e5m2_to_float(uint8_t b)
{
    return braid_rop_e5m22f(b);
}

uint8_t braid_float_to_e5m2(float f)
{
    return braid_rop_f2e5m2(f);
}
