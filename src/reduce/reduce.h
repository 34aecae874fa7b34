/* CPU reduction kernels: one entry point per shape, dispatched on (dtype, op).
 *
 * All kernels are element-wise and allow dst to alias a or b exactly (not partially).
 * float16/bfloat16/float8 are widened to float32, combined, and rounded back to nearest-even
 * (float8: saturating to the largest finite value, as NCCL's __NV_SATFINITE conversions);
 * NaN and inf propagate as IEEE 754 says (min/max return NaN if either input is NaN).
 * Integer sum/prod wrap (two's complement, computed unsigned to avoid UB). */
#ifndef BRAID_REDUCE_REDUCE_H
#define BRAID_REDUCE_REDUCE_H

#include "braid/braid.h"

#include <stddef.h>
#include <stdint.h>

/* dst[i] = a[i] op b[i] for i < count. op BRAID_AVG combines as sum. */
void braid_reduce_pair(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *a,
                       const void *b, size_t count);

/* The last step of a reduction: dst[i] = a[i] op b[i], and for BRAID_AVG the sum is then
 * divided by nranks (integers: truncating division; floats: IEEE division in the element's
 * compute type, float32 for float16/bfloat16). Other ops ignore nranks. The collectives divide
 * for integer, float32 and float64 avg; float16/bfloat16/float8 avg is pre-scaled
 * (braid_reduce_avg_prescale). */
void braid_reduce_pair_final(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *a,
                             const void *b, size_t count, int nranks);

/* dst = src[0] op src[1] op ... op src[ns - 1], combined left to right: bit for bit what
 * braid_reduce_pair(dst, src[0], src[1]) and then braid_reduce_pair(dst, dst, src[j]) for each
 * further source give, the last step braid_reduce_pair_final(..., nranks) when nranks > 0 (so
 * BRAID_AVG divides the sum) or braid_reduce_pair when nranks == 0 (BRAID_AVG sums). Up to
 * four sources are read in one pass, so their streams are in flight together, which a chain of
 * pairs (one new source per pass) does not do. ns >= 1 (1: braid_reduce_finalize, or a copy
 * when nranks == 0). dst may be src[0]; otherwise it overlaps no source. */
void braid_reduce_many(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *const *src,
                       int ns, size_t count, int nranks);

/* dst[i] = src[i] / nranks for BRAID_AVG with a single rank (or a copy for other ops). */
void braid_reduce_finalize(braid_datatype_t dtype, braid_redop_t op, void *dst, const void *src,
                           size_t count, int nranks);

/* dst[i] = src[i] * scalar for i < count (scalar: one element of dtype, host memory): the
 * pre-multiplication of PreMulSum, rounded once in the element type as its product (integers
 * wrap; float16/bfloat16/float8 through float32, the exact product rounded once). dst may
 * alias src exactly. */
void braid_reduce_scale(braid_datatype_t dtype, void *dst, const void *src, size_t count,
                        const void *scalar);

/* Whether the collectives compute BRAID_AVG of dtype as NCCL's ncclAvg of the floating types:
 * each rank's input pre-scaled by 1/nranks (braid_reduce_avg_prescale), then summed, so no
 * partial sum leaves the dtype's range. 1 for the narrow floats, float16, bfloat16 and float8,
 * which the collectives scale at their entry before the sum (core/redop.c). 0 for the integers
 * and for float32/float64, whose avg sums and divides at the last step (the avg kernels above):
 * their range makes an overflowing partial sum unlikely, and the scaling would be one more pass
 * over the input (measured 1.2-1.3x the time of a large float32 all-reduce). */
int braid_reduce_avg_prescales(braid_datatype_t dtype);

/* dst[i] = src[i] * (1 / nranks) for any floating dtype: the factor is (float)(1.0 / nranks)
 * (float64: 1.0 / nranks), the product computed in float32 (float64) and rounded once to the
 * dtype (float8 saturating), NaNs as braid_reduce_scale's. dst may alias src exactly. */
void braid_reduce_avg_prescale(braid_datatype_t dtype, void *dst, const void *src, size_t count,
                               int nranks);

/* Scalar conversions (exported for tests and the perf tools' checkers). */
float braid_half_to_float(uint16_t h);
uint16_t braid_float_to_half(float f); /* round to nearest even, overflow -> inf, NaN kept */
float braid_bf16_to_float(uint16_t b);
uint16_t braid_float_to_bf16(float f); /* round to nearest even, NaN kept quiet */
float braid_e4m3_to_float(uint8_t b);  /* float8 e4m3, exact */
uint8_t braid_float_to_e4m3(float f);  /* nearest even, saturating to +-448, NaN -> 0x7f|sign */
float braid_e5m2_to_float(uint8_t b);  /* float8 e5m2, exact */
uint8_t braid_float_to_e5m2(float f);  /* nearest even, saturating to +-57344 (inf too) */

/* Which SIMD path the dispatcher chose ("avx512", "avx2", "generic"). */
const char *braid_reduce_isa(void);

#endif
