/* braid_copy's vector loops (core/copy.h). */
#include "core/copy.h"

#include <stdatomic.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(__x86_64__)
/* Copies the head up to dst's alignment `al` with memcpy; returns the bytes done. */
static inline size_t head_to(char *dst, const char *src, size_t n, size_t al)
{
    size_t head = (al - ((uintptr_t)dst & (al - 1))) & (al - 1);
    if (head > n) head = n;
    memcpy(dst, src, head);
    return head;
}

__attribute__((target("avx2"))) static void copy_avx2(char *dst, const char *src, size_t n)
{
    size_t h = head_to(dst, src, n, 32);
    dst += h, src += h, n -= h;
    for (; n >= 128; n -= 128, dst += 128, src += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)src);
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(src + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(src + 96));
        _mm256_store_si256((__m256i *)dst, a);
        _mm256_store_si256((__m256i *)(dst + 32), b);
        _mm256_store_si256((__m256i *)(dst + 64), c);
        _mm256_store_si256((__m256i *)(dst + 96), d);
    }
    _mm256_zeroupper();
    memcpy(dst, src, n);
}

/* stream: non-temporal stores (braid_copy_nt). */
static void copy_sse2(char *dst, const char *src, size_t n, int stream)
{
    size_t h = head_to(dst, src, n, 16);
    dst += h, src += h, n -= h;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
        if (stream) {
            _mm_stream_si128((__m128i *)dst, a);
            _mm_stream_si128((__m128i *)(dst + 16), b);
            _mm_stream_si128((__m128i *)(dst + 32), c);
            _mm_stream_si128((__m128i *)(dst + 48), d);
        } else {
            _mm_store_si128((__m128i *)dst, a);
            _mm_store_si128((__m128i *)(dst + 16), b);
            _mm_store_si128((__m128i *)(dst + 32), c);
            _mm_store_si128((__m128i *)(dst + 48), d);
        }
    }
    memcpy(dst, src, n);
}

static int has_avx2(void)
{
    /* Every thread computes the same value: relaxed atomics make the race a defined one. */
    static _Atomic int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        x = __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return x;
}
#endif

void braid_copy_large(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    if (has_avx2())
        copy_avx2(dst, src, n);
    else
        copy_sse2(dst, src, n, 0);
#else
    memcpy(dst, src, n);
#endif
}

void braid_copy_nt(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    copy_sse2(dst, src, n, 1);
#else
    memcpy(dst, src, n);
#endif
}

void braid_copy_shared(void *dst, const void *src, size_t n, int nt)
{
#if defined(__x86_64__)
    if (nt && n >= BRAID_SHM_NT_BYTES) {
        copy_sse2(dst, src, n, 1);
        _mm_sfence();
        return;
    }
#else
    (void)nt;
#endif
    braid_copy(dst, src, n);
}

int braid_copy_shared_nt_default(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_is("amd") ? 1 : 0;
#else
    return 0;
#endif
}

const char *braid_copy_isa(void)
{
#if defined(__x86_64__)
    return has_avx2() ? "avx2" : "sse2";
#else
    return "memcpy";
#endif
}
