/* The CUDA reduction kernels' launcher (reduce.cu), callable from C. */
#ifndef BRAID_CUDA_REDUCE_DEV_H
#define BRAID_CUDA_REDUCE_DEV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel kinds, in the CPU table's order: pair ops, then avg (final), div (finalize), and the
 * pre-scaling of avg (braid_reduce_avg_prescale). */
enum {
    BRAID_CUDA_K_SUM = 0,
    BRAID_CUDA_K_PROD,
    BRAID_CUDA_K_MIN,
    BRAID_CUDA_K_MAX,
    BRAID_CUDA_K_AVG, /* dst = (a + b) / nranks */
    BRAID_CUDA_K_DIV, /* dst = a / nranks (b unused) */
    BRAID_CUDA_K_PRE, /* floating dtypes: dst = a * (1 / nranks), avg's pre-scaling (b unused) */
    BRAID_CUDA_K_COUNT
};

/* Launches dst[i] = a[i] kind b[i] (i < count) for dtype (braid_datatype_t) on stream (a
 * cudaStream_t); dst may alias a or b exactly. Returns a cudaError_t (0 = launched). */
int braid_cuda_reduce_launch(int dtype, int kind, void *dst, const void *a, const void *b,
                             size_t count, int nranks, void *stream);

#ifdef __cplusplus
}
#endif

#endif
