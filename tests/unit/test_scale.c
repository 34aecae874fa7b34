/* The PreMulSum kernel braid_reduce_scale (src/reduce): dst = src * scalar must be bit-identical
 * to the product kernel with the scalar broadcast (which tests/unit/test_reduce.c checks against
 * an independent reference on every ISA path), for every dtype and ISA path, arbitrary bit
 * patterns (NaN payloads, infinities, subnormals), NaN and zero scalars, misaligned and in place,
 * counts around the vector blocks. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"
#include "cpu_isa.h"
#include "ref_half.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(scale, .timeout = 60);

static void check_dtype(braid_datatype_t dt, size_t count, size_t off, int in_place,
                        uint64_t scalar)
{
    size_t es = braid_dtype_size(dt), bytes = count * es;
    unsigned char *src = malloc(bytes + off + 1), *bs = malloc(bytes + 1);
    unsigned char *d1 = malloc(bytes + off + 1), *d2 = malloc(bytes + 1);
    cr_assert(src && bs && d1 && d2);
    for (size_t i = 0; i < count; i++) {
        uint64_t v = mix64(i * 31 + (uint64_t)dt * 7 + off);
        memcpy(src + off + i * es, &v, es);
        memcpy(bs + i * es, &scalar, es);
    }
    braid_reduce_pair(dt, BRAID_PROD, d2, src + off, bs, count);
    unsigned char *dst = in_place ? src + off : d1 + off;
    braid_reduce_scale(dt, dst, src + off, count, &scalar);
    for (size_t i = 0; i < count; i++) {
        uint64_t g = 0, w = 0;
        memcpy(&g, dst + i * es, es);
        memcpy(&w, d2 + i * es, es);
        cr_assert_eq(g, w,
                     "%s scale (isa %s) count=%zu off=%zu%s scalar 0x%llx: [%zu] = 0x%llx, "
                     "prod kernel 0x%llx",
                     braid_dtype_name(dt), braid_reduce_isa(), count, off,
                     in_place ? " in place" : "", (unsigned long long)scalar, i,
                     (unsigned long long)g, (unsigned long long)w);
    }
    free(src);
    free(bs);
    free(d1);
    free(d2);
}

static void check_isa(const char *isa)
{
    if (!cpu_has(isa)) cr_skip_test("this CPU has no %s", isa);
    setenv("BRAID_REDUCE_ISA", isa, 1);
    cr_assert_str_eq(braid_reduce_isa(), isa);
    static const size_t counts[] = {1, 7, 63, 64, 65, 129, 1000, 4099};
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (int k = 0; k < 4; k++) {
                uint64_t s = mix64((uint64_t)(dt * 100 + (int)c * 4 + k));
                if (k == 1) s = 0;     /* zero scalar: signed zeros, NaN */
                if (k == 2) s = ~0ull; /* all ones: NaN of every float type, -1 */
                check_dtype((braid_datatype_t)dt, counts[c], (size_t)k % 3, k & 1, s);
            }
}

Test(scale, generic)
{
    check_isa("generic");
}

Test(scale, avx2)
{
    check_isa("avx2");
}

Test(scale, avx512)
{
    check_isa("avx512");
}

Test(scale, count_zero_touches_nothing)
{
    uint64_t s = 3;
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++)
        braid_reduce_scale((braid_datatype_t)dt, NULL, NULL, 0, &s);
}
