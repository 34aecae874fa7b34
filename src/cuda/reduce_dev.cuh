/* Device reduction over a range, shared by the reduction kernels (reduce.cu) and the device
 * engine's primitives (engine_dev.h under nvcc): the element functions are reduce_ops.h's,
 * compiled __host__ __device__, so the GPU computes exactly what the CPU kernels compute.
 *
 * A range is done with 16-byte vector loads and stores (ld.global.v4 / st.global.v4; the PTX
 * check tests/gpu/ptx_check.sh asserts it for every kernel) where dst, a and b have the same
 * alignment modulo 16: a scalar head up to the 16-byte boundary, the vector body, a scalar
 * tail. The vector accesses are __ldcg/__stcg (global space, cached in L2 only): the device
 * engine's pointers come from memory (generic), these make them global accesses, and slots
 * written by another GPU or process must not be served from a stale L1 line. Ranges whose pointers
 * are misaligned relative to each other are done with scalar accesses. `lane`/`nlanes` split the
 * work among cooperating threads. */
#ifndef BRAID_CUDA_REDUCE_DEV_CUH
#define BRAID_CUDA_REDUCE_DEV_CUH

#include "reduce/reduce_ops.h"

#include <stddef.h>
#include <stdint.h>

namespace braid_dev
{

/* The element operations as types: OP::apply(x, y) combines (pair kernels); avg and div take
 * the divisor (dn, the element's compute type). */
#define BRAID_DEV_PAIR_OP(tag, T, opname)                                                          \
    struct tag##_##opname {                                                                        \
        typedef T type;                                                                            \
        typedef int dn_t;                                                                          \
        static __device__ __forceinline__ T apply(T x, T y, dn_t)                                  \
        {                                                                                          \
            return braid_rop_##tag##_##opname(x, y);                                               \
        }                                                                                          \
    };
#define BRAID_DEV_AVG_OP(tag, T)                                                                   \
    struct tag##_avg {                                                                             \
        typedef T type;                                                                            \
        typedef braid_rop_##tag##_dn_t dn_t;                                                       \
        static __device__ __forceinline__ T apply(T x, T y, dn_t dn)                               \
        {                                                                                          \
            return braid_rop_##tag##_avg(x, y, dn);                                                \
        }                                                                                          \
    };                                                                                             \
    struct tag##_div {                                                                             \
        typedef T type;                                                                            \
        typedef braid_rop_##tag##_dn_t dn_t;                                                       \
        static __device__ __forceinline__ T apply(T x, T, dn_t dn)                                 \
        {                                                                                          \
            return braid_rop_##tag##_div(x, dn);                                                   \
        }                                                                                          \
    };
#define BRAID_DEV_DTYPE(tag, T)                                                                    \
    BRAID_DEV_PAIR_OP(tag, T, sum)                                                                 \
    BRAID_DEV_PAIR_OP(tag, T, prod)                                                                \
    BRAID_DEV_PAIR_OP(tag, T, min)                                                                 \
    BRAID_DEV_PAIR_OP(tag, T, max)                                                                 \
    BRAID_DEV_AVG_OP(tag, T)

BRAID_DEV_DTYPE(i8, int8_t)
BRAID_DEV_DTYPE(u8, uint8_t)
BRAID_DEV_DTYPE(i32, int32_t)
BRAID_DEV_DTYPE(u32, uint32_t)
BRAID_DEV_DTYPE(i64, int64_t)
BRAID_DEV_DTYPE(u64, uint64_t)
BRAID_DEV_DTYPE(bf16, uint16_t)
BRAID_DEV_DTYPE(f32, float)
BRAID_DEV_DTYPE(f64, double)

/* float16: widened to float32, combined with the float32 function, rounded once (as the CPU's
 * float16 kernels). */
#define BRAID_DEV_F16_OP(opname)                                                                   \
    struct f16_##opname {                                                                          \
        typedef uint16_t type;                                                                     \
        typedef int dn_t;                                                                          \
        static __device__ __forceinline__ uint16_t apply(uint16_t x, uint16_t y, dn_t)             \
        {                                                                                          \
            return braid_rop_f2h(braid_rop_f32_##opname(braid_rop_h2f(x), braid_rop_h2f(y)));      \
        }                                                                                          \
    };
BRAID_DEV_F16_OP(sum)
BRAID_DEV_F16_OP(prod)
BRAID_DEV_F16_OP(min)
BRAID_DEV_F16_OP(max)
struct f16_avg {
    typedef uint16_t type;
    typedef float dn_t;
    static __device__ __forceinline__ uint16_t apply(uint16_t x, uint16_t y, float dn)
    {
        return braid_rop_f2h(braid_rop_f32_avg(braid_rop_h2f(x), braid_rop_h2f(y), dn));
    }
};
struct f16_div {
    typedef uint16_t type;
    typedef float dn_t;
    static __device__ __forceinline__ uint16_t apply(uint16_t x, uint16_t, float dn)
    {
        return braid_rop_f2h(braid_rop_f32_div(braid_rop_h2f(x), dn));
    }
};

/* BRAID_AVG's pre-scaling of the floating dtypes (reduce_ops.h): apply(x, _, s) = x * s rounded
 * once, s = OP::arg(nranks), the factor 1/nranks (the launcher passes the other ops nranks). */
#define BRAID_DEV_PRE_OP(tag, T, factor)                                                           \
    struct tag##_pre {                                                                             \
        typedef T type;                                                                            \
        typedef braid_rop_##tag##_pre_t dn_t;                                                      \
        static __host__ __device__ __forceinline__ dn_t arg(int nranks)                            \
        {                                                                                          \
            return factor(nranks);                                                                 \
        }                                                                                          \
        static __device__ __forceinline__ T apply(T x, T, dn_t s)                                  \
        {                                                                                          \
            return braid_rop_##tag##_pre(x, s);                                                    \
        }                                                                                          \
    };
BRAID_DEV_PRE_OP(f16, uint16_t, braid_rop_avg_factor_f32)
BRAID_DEV_PRE_OP(bf16, uint16_t, braid_rop_avg_factor_f32)
BRAID_DEV_PRE_OP(f32, float, braid_rop_avg_factor_f32)
BRAID_DEV_PRE_OP(f64, double, braid_rop_avg_factor_f64)

template <typename T> union vec16 {
    uint4 v;
    T e[16 / sizeof(T)];
};

/* dst[i] = OP(a[i], b[i]) for i < n, and with TWO the same into dst2[i] (one read, two writes:
 * the engine's recvReduceCopySend), threads lane..n step nlanes. Vector accesses where every
 * pointer has the same alignment modulo 16. */
template <class OP, bool TWO>
__device__ __forceinline__ void reduce_range2(typename OP::type *dst, typename OP::type *dst2,
                                              const typename OP::type *a,
                                              const typename OP::type *b, size_t n,
                                              typename OP::dn_t dn, size_t lane, size_t nlanes)
{
    typedef typename OP::type T;
    const size_t V = 16 / sizeof(T);
    uintptr_t mis = (uintptr_t)dst & 15;
    size_t head = n;
    if (((uintptr_t)a & 15) == mis && ((uintptr_t)b & 15) == mis &&
        (!TWO || ((uintptr_t)dst2 & 15) == mis) && mis % sizeof(T) == 0) {
        head = ((16 - mis) & 15) / sizeof(T);
        if (head > n) head = n;
    }
    for (size_t i = lane; i < head; i += nlanes) {
        T r = OP::apply(a[i], b[i], dn);
        dst[i] = r;
        if (TWO) dst2[i] = r;
    }
    if (head == n) return;
    size_t nvec = (n - head) / V;
    uint4 *vd = (uint4 *)(dst + head);
    uint4 *vd2 = (uint4 *)(dst2 + head);
    const uint4 *va = (const uint4 *)(a + head);
    const uint4 *vb = (const uint4 *)(b + head);
    /* U vectors of each source in flight per thread before any is used: a few blocks (the
     * device engine's lanes) then keep enough loads outstanding to stream from memory. */
    const size_t U = 4;
    size_t i = lane;
    for (; i + (U - 1) * nlanes < nvec; i += U * nlanes) {
        vec16<T> x[U], y[U];
#pragma unroll
        for (size_t u = 0; u < U; u++) {
            x[u].v = __ldcg(va + i + u * nlanes);
            y[u].v = __ldcg(vb + i + u * nlanes);
        }
#pragma unroll
        for (size_t u = 0; u < U; u++) {
            vec16<T> r;
#pragma unroll
            for (size_t j = 0; j < V; j++)
                r.e[j] = OP::apply(x[u].e[j], y[u].e[j], dn);
            __stcg(vd + i + u * nlanes, r.v);
            if (TWO) __stcg(vd2 + i + u * nlanes, r.v);
        }
    }
    for (; i < nvec; i += nlanes) {
        vec16<T> x, y, r;
        x.v = __ldcg(va + i);
        y.v = __ldcg(vb + i);
#pragma unroll
        for (size_t j = 0; j < V; j++)
            r.e[j] = OP::apply(x.e[j], y.e[j], dn);
        __stcg(vd + i, r.v);
        if (TWO) __stcg(vd2 + i, r.v);
    }
    for (size_t i = head + nvec * V + lane; i < n; i += nlanes) {
        T r = OP::apply(a[i], b[i], dn);
        dst[i] = r;
        if (TWO) dst2[i] = r;
    }
}

/* dst[i] = OP(a[i], b[i]) for i < n, threads lane..n step nlanes. */
template <class OP>
__device__ __forceinline__ void reduce_range(typename OP::type *dst, const typename OP::type *a,
                                             const typename OP::type *b, size_t n,
                                             typename OP::dn_t dn, size_t lane, size_t nlanes)
{
    reduce_range2<OP, false>(dst, dst, a, b, n, dn, lane, nlanes);
}

/* Byte copy to dst (skipped where dst == src) and, with TWO, to dst2 too from one read, with
 * 16-byte accesses where the pointers allow (same alignment modulo 16). */
template <bool TWO>
__device__ __forceinline__ void copy_range2(void *dst_, void *dst2_, const void *src_, size_t bytes,
                                            size_t lane, size_t nlanes)
{
    char *dst = (char *)dst_, *dst2 = (char *)dst2_;
    const char *src = (const char *)src_;
    const bool one = dst != src; /* in place: only dst2 needs the bytes */
    if (!one && !TWO) return;
    uintptr_t mis = (uintptr_t)src & 15;
    bool vec = (!one || ((uintptr_t)dst & 15) == mis) && (!TWO || ((uintptr_t)dst2 & 15) == mis);
    size_t head = vec ? ((16 - mis) & 15) : bytes;
    if (head > bytes) head = bytes;
    for (size_t i = lane; i < head; i += nlanes) {
        char c = src[i];
        if (one) dst[i] = c;
        if (TWO) dst2[i] = c;
    }
    if (head == bytes) return;
    size_t nvec = (bytes - head) / 16;
    uint4 *vd = (uint4 *)(dst + head);
    uint4 *vd2 = (uint4 *)(dst2 + head);
    const uint4 *vs = (const uint4 *)(src + head);
    const size_t U = 8; /* loads in flight per thread (see reduce_range2) */
    size_t i = lane;
    for (; i + (U - 1) * nlanes < nvec; i += U * nlanes) {
        uint4 v[U];
#pragma unroll
        for (size_t u = 0; u < U; u++)
            v[u] = __ldcg(vs + i + u * nlanes);
#pragma unroll
        for (size_t u = 0; u < U; u++) {
            if (one) __stcg(vd + i + u * nlanes, v[u]);
            if (TWO) __stcg(vd2 + i + u * nlanes, v[u]);
        }
    }
    for (; i < nvec; i += nlanes) {
        uint4 v = __ldcg(vs + i);
        if (one) __stcg(vd + i, v);
        if (TWO) __stcg(vd2 + i, v);
    }
    for (size_t i = head + nvec * 16 + lane; i < bytes; i += nlanes) {
        char c = src[i];
        if (one) dst[i] = c;
        if (TWO) dst2[i] = c;
    }
}

/* Byte copy with 16-byte accesses where the pointers allow (same alignment modulo 16). */
__device__ __forceinline__ void copy_range(void *dst_, const void *src_, size_t bytes, size_t lane,
                                           size_t nlanes)
{
    copy_range2<false>(dst_, dst_, src_, bytes, lane, nlanes);
}

} // namespace braid_dev

#endif
