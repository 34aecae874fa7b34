#include "reduce/reduce.h"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
__attribute__((target("avx512f"))) static void fuse(float *A, const float *s0, const float *s1,
                                                    const float *s2, const float *s3, size_t m)
{
    for (size_t i = 0; i < m; i += 16)
        _mm512_storeu_ps(A + i, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(s0 + i),
                                                                          _mm512_loadu_ps(s1 + i)),
                                                            _mm512_loadu_ps(s2 + i)),
                                              _mm512_loadu_ps(s3 + i)));
}
int main(int argc, char **argv)
{
    size_t S = argc > 1 ? strtoull(argv[1], 0, 0) : 4096; /* floats per source */
    size_t sub = 4096;
    int it = (int)(4e9 / (S * 16));
    float *s[4], *acc = aligned_alloc(64, sub * 4);
    for (int j = 0; j < 4; j++) {
        s[j] = aligned_alloc(64, S * 4);
        for (size_t i = 0; i < S; i++)
            s[j][i] = i * 0.5f + j;
    }
    for (int v = 0; v < 3; v++) {
        double t0 = now();
        for (int r = 0; r < it; r++)
            for (size_t o = 0; o < S; o += sub) {
                const void *in[4] = {s[0] + o, s[1] + o, s[2] + o, s[3] + o};
                if (v == 0) {
                    braid_reduce_pair(BRAID_FLOAT32, BRAID_SUM, acc, in[0], in[1], sub);
                    braid_reduce_pair(BRAID_FLOAT32, BRAID_SUM, acc, acc, in[2], sub);
                    braid_reduce_pair_final(BRAID_FLOAT32, BRAID_SUM, acc, acc, in[3], sub, 4);
                } else if (v == 1)
                    braid_reduce_many(BRAID_FLOAT32, BRAID_SUM, acc, in, 4, sub, 4);
                else
                    fuse(acc, in[0], in[1], in[2], in[3], sub);
            }
        double t = now() - t0;
        printf("v%d %.2f GB/s read\n", v, 16.0 * S * it / t / 1e9);
    }
}
