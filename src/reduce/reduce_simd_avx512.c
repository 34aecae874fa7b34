/* The "avx512" kernel variant: the template of reduce_kernels.h compiled for AVX-512 F/BW/VL
 * with 512-bit vectors preferred, float16 converted by the AVX-512F forms of vcvtph2ps and
 * vcvtps2ph (immediate round-to-nearest-even, exceptions suppressed). Results are
 * bit-identical to the generic variant (see reduce_simd_avx2.c for the NaN argument).
 *
 * Vectorization (GCC 12, -O2, checked with objdump -d): the float32 sum loop is
 * vmovups/vaddps/vmovups on zmm registers, min/max use vcmpps into mask registers and
 * vpblendmd; float16 sum is vcvtph2ps zmm, vaddps zmm, vcvtps2ph. No FMA in the target (no
 * contraction can change the rounding). */
#include "reduce/reduce_ops.h"

#if BRAID_REDUCE_X86
#include <immintrin.h>

#if defined(__clang__) /* clang has no prefer-vector-width in target() */
#define REDUCE_ATTR __attribute__((target("avx512f,avx512bw,avx512vl")))
#else
#define REDUCE_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
#endif
#define REDUCE_SFX(name) name##_avx512
#define REDUCE_TABLE braid_reduce_table_avx512
#define REDUCE_ISA_NAME "avx512"

static REDUCE_ATTR inline void braid_rk_h2f_block_avx512(float *f, const braid_rop_f16_mem *h)
{
    for (size_t j = 0; j < BRAID_RK_HBLK; j += 16)
        _mm512_storeu_ps(f + j, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)(h + j))));
}

static REDUCE_ATTR inline void braid_rk_f2h_block_avx512(braid_rop_f16_mem *h, const float *f)
{
    for (size_t j = 0; j < BRAID_RK_HBLK; j += 16)
        _mm256_storeu_si256(
            (__m256i_u *)(h + j),
            _mm512_cvtps_ph(_mm512_loadu_ps(f + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#define REDUCE_H2F_BLOCK braid_rk_h2f_block_avx512
#define REDUCE_F2H_BLOCK braid_rk_f2h_block_avx512
#include "reduce/reduce_kernels.h"

#else
typedef int braid_reduce_no_avx512_t; /* ISO C wants a non-empty file */
#endif
