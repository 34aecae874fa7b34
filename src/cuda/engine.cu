/* The device engine's kernel: engine_dev.h's protocol compiled by nvcc, one thread block per
 * channel (its threads are the lanes of every copy and reduction), data moved with reduce_dev.cuh
 * (16-byte accesses, the shared element functions). Each launch runs every unfinished channel
 * until it is done or a wait polled `budget` times; the host relaunches until every channel
 * reports done (see engine_dev.h on time-sliced processes). Compiled here; run only on a GPU. */
#define BRAID_DEV_ENGINE_IMPL 1
#include "cuda/engine_dev.h"
#include "cuda/engine_launch.h"
#include "cuda/reduce_dev.cuh"

#include <cuda_runtime.h>

static __device__ __forceinline__ void bde_copy(void *dst, const void *src, size_t bytes)
{
    braid_dev::copy_range(dst, src, bytes, threadIdx.x, blockDim.x);
}

static __device__ __forceinline__ void bde_copy2(void *dst, void *dst2, const void *src,
                                                 size_t bytes)
{
    braid_dev::copy_range2<true>(dst, dst2, src, bytes, threadIdx.x, blockDim.x);
}

/* dst (and dst2 unless NULL) = x OP y */
template <class OP>
static __device__ __forceinline__ void bde_red(void *dst, void *dst2, const void *x, const void *y,
                                               size_t n, int nranks)
{
    typedef typename OP::type T;
    typedef typename OP::dn_t D;
    if (dst2)
        braid_dev::reduce_range2<OP, true>((T *)dst, (T *)dst2, (const T *)x, (const T *)y, n,
                                           (D)nranks, threadIdx.x, blockDim.x);
    else
        braid_dev::reduce_range2<OP, false>((T *)dst, (T *)dst, (const T *)x, (const T *)y, n,
                                            (D)nranks, threadIdx.x, blockDim.x);
}

#define BDE_CASE(dt, tag)                                                                          \
    case dt:                                                                                       \
        switch (kind) {                                                                            \
        case 0:                                                                                    \
            bde_red<braid_dev::tag##_sum>(dst, dst2, x, y, n, nr);                                 \
            return;                                                                                \
        case 1:                                                                                    \
            bde_red<braid_dev::tag##_prod>(dst, dst2, x, y, n, nr);                                \
            return;                                                                                \
        case 2:                                                                                    \
            bde_red<braid_dev::tag##_min>(dst, dst2, x, y, n, nr);                                 \
            return;                                                                                \
        case 3:                                                                                    \
            bde_red<braid_dev::tag##_max>(dst, dst2, x, y, n, nr);                                 \
            return;                                                                                \
        case 4:                                                                                    \
            bde_red<braid_dev::tag##_avg>(dst, dst2, x, y, n, nr);                                 \
            return;                                                                                \
        default:                                                                                   \
            bde_red<braid_dev::tag##_div>(dst, dst2, x, y, n, nr);                                 \
            return;                                                                                \
        }

/* kind: 0..3 sum, prod, min, max; 4 avg (final); 5 div (dst = x / nranks) */
static __device__ void bde_kernel_op(int dtype, int kind, void *dst, void *dst2, const void *x,
                                     const void *y, size_t n, int nr)
{
    switch (dtype) {
        BDE_CASE(0, i8)
        BDE_CASE(1, u8)
        BDE_CASE(2, i32)
        BDE_CASE(3, u32)
        BDE_CASE(4, i64)
        BDE_CASE(5, u64)
        BDE_CASE(6, f16)
        BDE_CASE(7, bf16)
        BDE_CASE(8, f32)
        BDE_CASE(9, f64)
    default:
        return;
    }
}

static __device__ __forceinline__ void bde_reduce(const braid_dev_chan_t *ch, void *dst,
                                                  const void *x, const void *y, size_t count,
                                                  int final)
{
    int kind = ch->op == 4 /* BRAID_AVG */ ? (final ? 4 : 0) : ch->op;
    bde_kernel_op(ch->dtype, kind, dst, NULL, x, y, count, ch->nranks);
}

static __device__ __forceinline__ void bde_reduce2(const braid_dev_chan_t *ch, void *dst,
                                                   void *dst2, const void *x, const void *y,
                                                   size_t count)
{
    int kind = ch->op == 4 /* BRAID_AVG */ ? 4 : ch->op;
    bde_kernel_op(ch->dtype, kind, dst, dst2, x, y, count, ch->nranks);
}

static __device__ __forceinline__ void bde_finalize(const braid_dev_chan_t *ch, void *dst,
                                                    const void *src, size_t count)
{
    if (ch->op == 4)
        bde_kernel_op(ch->dtype, 5, dst, NULL, src, src, count, ch->nranks);
    else
        bde_copy(dst, src, count * ch->es);
}

__global__ void __launch_bounds__(512)
    braid_dev_engine_kernel(braid_dev_chan_t *chans, uint64_t budget)
{
    braid_dev_chan_t *ch = &chans[blockIdx.x];
    if (ch->status == BRAID_DEV_DONE && ch->pc == ch->nsteps) return;
    (void)braid_dev_chan_run(ch, budget);
}

extern "C" int braid_cuda_engine_preload(void)
{
    cudaFuncAttributes a;
    return (int)cudaFuncGetAttributes(&a, braid_dev_engine_kernel);
}

extern "C" int braid_cuda_engine_launch(void *chans, int nchannels, int threads, uint64_t budget,
                                        void *stream)
{
    /* The launch's own error only: an earlier call's non-sticky error still pending on this
     * thread must not make a launch that worked look failed. */
    (void)cudaGetLastError();
    braid_dev_engine_kernel<<<nchannels, threads, 0, (cudaStream_t)stream>>>(
        (braid_dev_chan_t *)chans, budget);
    return (int)cudaGetLastError();
}
