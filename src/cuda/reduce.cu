/* CUDA reduction kernels: every dtype x (sum, prod, min, max, avg, div, and for the floating
 * dtypes avg's pre-scaling) of the CPU table (reduce/reduce_kernels.h), from the same element
 * functions (reduce_dev.cuh), and their launcher (reduce_dev.h). Results are bit-identical to
 * braid_reduce_pair/_final/finalize/_avg_prescale: no fast-math, --fmad=false (src:
 * CMakeLists.txt), IEEE division for avg. */
#include "cuda/reduce_dev.cuh"
#include "cuda/reduce_dev.h"

#include <cuda_runtime.h>

namespace braid_dev
{

template <class OP>
__global__ void __launch_bounds__(512)
    reduce_kernel(typename OP::type *dst, const typename OP::type *a, const typename OP::type *b,
                  size_t n, typename OP::dn_t dn)
{
    reduce_range<OP>(dst, a, b, n, dn, (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                     (size_t)gridDim.x * blockDim.x);
}

/* The kernels' argument: nranks, or OP::arg(nranks) where OP has one (the pre-scaling). */
template <class OP, class = void> struct op_arg {
    static typename OP::dn_t get(int nranks)
    {
        return (typename OP::dn_t)nranks;
    }
};
template <class OP> struct op_arg<OP, decltype((void)OP::arg(0))> {
    static typename OP::dn_t get(int nranks)
    {
        return OP::arg(nranks);
    }
};

template <class OP>
static cudaError_t launch(void *dst, const void *a, const void *b, size_t n, int nranks,
                          cudaStream_t s)
{
    typedef typename OP::type T;
    const unsigned threads = 512;
    size_t vecs = (n * sizeof(T) + 15) / 16;
    size_t blocks = (vecs + threads - 1) / threads;
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) == cudaSuccess)
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (blocks > (size_t)sms * 8) blocks = (size_t)sms * 8; /* grid-stride beyond that */
    if (blocks == 0) blocks = 1;
    (void)cudaGetLastError(); /* the launch's own error only (engine.cu) */
    reduce_kernel<OP><<<(unsigned)blocks, threads, 0, s>>>((T *)dst, (const T *)a, (const T *)b, n,
                                                           op_arg<OP>::get(nranks));
    return cudaGetLastError();
}

typedef cudaError_t (*launch_fn)(void *, const void *, const void *, size_t, int, cudaStream_t);

#define ROW(tag)                                                                                   \
    {                                                                                              \
        launch<tag##_sum>, launch<tag##_prod>, launch<tag##_min>, launch<tag##_max>,               \
            launch<tag##_avg>, launch<tag##_div>, NULL                                             \
    }
#define ROWF(tag)                                                                                  \
    {                                                                                              \
        launch<tag##_sum>, launch<tag##_prod>, launch<tag##_min>, launch<tag##_max>,               \
            launch<tag##_avg>, launch<tag##_div>, launch<tag##_pre>                                \
    }

/* [dtype][sum, prod, min, max, avg, div, pre (floating dtypes)] */
static const launch_fn table[10][BRAID_CUDA_K_COUNT] = {
    ROW(i8),  ROW(u8),   ROW(i32),   ROW(u32),  ROW(i64),
    ROW(u64), ROWF(f16), ROWF(bf16), ROWF(f32), ROWF(f64),
};

} // namespace braid_dev

extern "C" int braid_cuda_reduce_launch(int dtype, int kind, void *dst, const void *a,
                                        const void *b, size_t count, int nranks, void *stream)
{
    if (dtype < 0 || dtype >= 10 || kind < 0 || kind >= BRAID_CUDA_K_COUNT ||
        !braid_dev::table[dtype][kind])
        return (int)cudaErrorInvalidValue;
    if (count == 0) return 0;
    return (int)braid_dev::table[dtype][kind](dst, a, b, count, nranks, (cudaStream_t)stream);
}
