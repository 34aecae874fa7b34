#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
static inline float s_sel(float x, float y)
{
    return x + (x != x ? x : y);
}
static inline float s_bits(float x, float y)
{
    uint32_t xi, yi;
    memcpy(&xi, &x, 4);
    memcpy(&yi, &y, 4);
    uint32_t m = -(uint32_t)(x != x);
    yi = (yi & ~m) | (xi & m);
    memcpy(&y, &yi, 4);
    return x + y;
}
static inline float s_max(float x, float y)
{
    return x + (x != x ? x : y) * 1.0f;
}
#define KER(name, F)                                                                               \
    ATTR static void name(float *restrict d, const float *a, const float *b, const float *c,       \
                          const float *e, size_t n)                                                \
    {                                                                                              \
        for (size_t i = 0; i + 128 <= n; i += 128) {                                               \
            _Pragma("GCC ivdep") for (size_t j = 0; j < 128; j++)                                  \
            {                                                                                      \
                size_t k = i + j;                                                                  \
                d[k] = F(F(F(a[k], b[k]), c[k]), e[k]);                                            \
            }                                                                                      \
        }                                                                                          \
    }
KER(k_sel, s_sel)
KER(k_bits, s_bits)
ATTR static void k_intr(float *d, const float *a, const float *b, const float *c, const float *e,
                        size_t m)
{
    for (size_t i = 0; i < m; i += 16) {
        __m512 x = _mm512_loadu_ps(a + i), y = _mm512_loadu_ps(b + i), z = _mm512_loadu_ps(c + i),
               w = _mm512_loadu_ps(e + i);
        __mmask16 k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        x = _mm512_add_ps(x, _mm512_mask_blend_ps(k, y, x));
        k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        x = _mm512_add_ps(x, _mm512_mask_blend_ps(k, z, x));
        k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        x = _mm512_add_ps(x, _mm512_mask_blend_ps(k, w, x));
        _mm512_storeu_ps(d + i, x);
    }
}
ATTR static void k_fast(float *d, const float *a, const float *b, const float *c, const float *e,
                        size_t m)
{
    for (size_t i = 0; i < m; i += 16) {
        __m512 x = _mm512_loadu_ps(a + i), y = _mm512_loadu_ps(b + i), z = _mm512_loadu_ps(c + i),
               w = _mm512_loadu_ps(e + i);
        __m512 r = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x, y), z), w);
        if (__builtin_expect(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q) != 0, 0)) {
            __mmask16 k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            x = _mm512_add_ps(x, _mm512_mask_blend_ps(k, y, x));
            k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            x = _mm512_add_ps(x, _mm512_mask_blend_ps(k, z, x));
            k = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            r = _mm512_add_ps(x, _mm512_mask_blend_ps(k, w, x));
        }
        _mm512_storeu_ps(d + i, r);
    }
}
ATTR static void k_plain(float *d, const float *a, const float *b, const float *c, const float *e,
                         size_t m)
{
    for (size_t i = 0; i < m; i += 16)
        _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(a + i),
                                                                          _mm512_loadu_ps(b + i)),
                                                            _mm512_loadu_ps(c + i)),
                                              _mm512_loadu_ps(e + i)));
}
int main(int argc, char **argv)
{
    size_t S = argc > 1 ? strtoull(argv[1], 0, 0) : 4096;
    size_t sub = 4096;
    int it = (int)(4e9 / (S * 16));
    if (it < 1) it = 1;
    float *s[4], *acc = aligned_alloc(64, sub * 4);
    for (int j = 0; j < 4; j++) {
        s[j] = aligned_alloc(64, S * 4);
        for (size_t i = 0; i < S; i++)
            s[j][i] = i * 0.5f + j;
    }
    for (int rep = 0; rep < 2; rep++)
        for (int v = 0; v < 5; v++) {
            double t0 = now();
            for (int r = 0; r < it; r++)
                for (size_t o = 0; o < S; o += sub) {
                    if (v == 0)
                        k_sel(acc, s[0] + o, s[1] + o, s[2] + o, s[3] + o, sub);
                    else if (v == 1)
                        k_bits(acc, s[0] + o, s[1] + o, s[2] + o, s[3] + o, sub);
                    else if (v == 2)
                        k_intr(acc, s[0] + o, s[1] + o, s[2] + o, s[3] + o, sub);
                    else if (v == 3)
                        k_fast(acc, s[0] + o, s[1] + o, s[2] + o, s[3] + o, sub);
                    else
                        k_plain(acc, s[0] + o, s[1] + o, s[2] + o, s[3] + o, sub);
                }
            double t = now() - t0;
            printf("v%d %.2f GB/s read\n", v, 16.0 * S * it / t / 1e9);
        }
}
