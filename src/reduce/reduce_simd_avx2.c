/* The "avx2" kernel variant: the template of reduce_kernels.h compiled for AVX2, with float16
 * converted by F16C (vcvtph2ps, and vcvtps2ph with immediate 0 = round to nearest even, which
 * ignores MXCSR). F16C quiets a signaling NaN where braid_rop_h2f keeps it, but every kernel
 * result that is NaN is quiet anyway (see reduce_ops.h), so the results are bit-identical to
 * the generic variant.
 *
 * Vectorization (GCC 12, -O2, checked with objdump -d): the float32 sum loop is
 * vmovups/vaddps/vmovups on ymm registers; float16 sum is vcvtph2ps ymm, vaddps ymm,
 * vcvtps2ph; bfloat16 uses vpslld/vpsrld/vpackusdw on ymm. The target deliberately leaves out
 * FMA so that no a*b+c can be contracted into a differently rounded fused multiply-add. */
#include "reduce/reduce_ops.h"

#if BRAID_REDUCE_X86
#include <immintrin.h>

#define REDUCE_ATTR __attribute__((target("avx2,f16c")))
#define REDUCE_SFX(name) name##_avx2
#define REDUCE_TABLE braid_reduce_table_avx2
#define REDUCE_ISA_NAME "avx2"

static REDUCE_ATTR inline void braid_rk_h2f_block_avx2(float *f, const braid_rop_f16_mem *h)
{
    for (size_t j = 0; j < BRAID_RK_HBLK; j += 8)
        _mm256_storeu_ps(f + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)(h + j))));
}

static REDUCE_ATTR inline void braid_rk_f2h_block_avx2(braid_rop_f16_mem *h, const float *f)
{
    for (size_t j = 0; j < BRAID_RK_HBLK; j += 8)
        _mm_storeu_si128((__m128i_u *)(h + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(f + j), _MM_FROUND_TO_NEAREST_INT));
}

#define REDUCE_H2F_BLOCK braid_rk_h2f_block_avx2
#define REDUCE_F2H_BLOCK braid_rk_f2h_block_avx2
#include "reduce/reduce_kernels.h"

#else
typedef int braid_reduce_no_avx2_t; /* ISO C wants a non-empty file */
#endif
