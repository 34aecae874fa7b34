/* BRAID_AVG's pre-scaling of the floating dtypes, braid_reduce_avg_prescale (src/reduce):
 * dst = src * (1/n) against the independent reference of tests/common/ref_reduce.h (double
 * arithmetic, the tests' own conversions) on every ISA path, for every floating dtype, arbitrary
 * bit patterns (NaN payloads, infinities, subnormals, values that saturate float8), rank counts
 * that are and are not powers of two (and 1024, where NCCL's float8 factor would be 0),
 * misaligned and in place, counts around the vector blocks. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"
#include "cpu_isa.h"
#include "ref_reduce.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(avg_prescale, .timeout = 60);

static void check_dtype(braid_datatype_t dt, size_t count, size_t off, int in_place, int nranks,
                        int wild)
{
    size_t es = esize(dt), bytes = count * es;
    unsigned char *src = malloc(bytes + off + 1), *out = malloc(bytes + off + 1);
    cr_assert(src && out);
    for (size_t i = 0; i < count; i++)
        put_elem(dt, src + off, i, gen_bits(dt, i, (uint64_t)nranks * 131 + off, wild));
    unsigned char *dst = in_place ? src + off : out + off;
    uint64_t *want = malloc(count * sizeof(*want));
    int *any_nan = malloc(count * sizeof(*any_nan));
    cr_assert(want && any_nan);
    for (size_t i = 0; i < count; i++) {
        want_t w = ref_avg_prescale(dt, get_elem(dt, src + off, i), nranks);
        want[i] = w.bits;
        any_nan[i] = w.any_nan;
    }
    braid_reduce_avg_prescale(dt, dst, src + off, count, nranks);
    for (size_t i = 0; i < count; i++) {
        uint64_t got = get_elem(dt, dst, i);
        want_t w = {want[i], any_nan[i]};
        cr_assert(want_ok(dt, w, got),
                  "%s %s prescale (isa %s) n=%d count=%zu off=%zu%s: [%zu] = 0x%llx, want 0x%llx",
                  dtname(dt), opname(BRAID_AVG), braid_reduce_isa(), nranks, count, off,
                  in_place ? " in place" : "", i, (unsigned long long)got,
                  (unsigned long long)want[i]);
    }
    free(src);
    free(out);
    free(want);
    free(any_nan);
}

static void check_isa(const char *isa)
{
    if (!cpu_has(isa)) cr_skip_test("this CPU has no %s", isa);
    setenv("BRAID_REDUCE_ISA", isa, 1);
    cr_assert_str_eq(braid_reduce_isa(), isa);
    static const size_t counts[] = {1, 7, 63, 64, 65, 129, 1000, 4099};
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 1000, 1024, 3000};
    for (size_t d = 0; d < NDTYPES; d++) {
        braid_datatype_t dt = all_dtypes[d];
        if (!is_float(dt)) continue;
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
                check_dtype(dt, counts[c], (c + k) % 3, (int)((c + k) & 1), ns[k], (int)(k & 1));
    }
}

Test(avg_prescale, generic)
{
    check_isa("generic");
}

Test(avg_prescale, avx2)
{
    check_isa("avx2");
}

Test(avg_prescale, avx512)
{
    check_isa("avx512");
}

/* The factor is float32's 1/n, not the dtype's: where the dtype cannot hold 1/n (e4m3's 1/3
 * would be 0.34375, 1/1024 would be 0) the result still is x/n to the dtype's precision. */
Test(avg_prescale, factor_is_float32)
{
    uint8_t x = 0x64; /* e4m3 48 */
    uint8_t y = 0;
    braid_reduce_avg_prescale(BRAID_FLOAT8_E4M3, &y, &x, 1, 3);
    cr_assert_float_eq(braid_e4m3_to_float(y), 16.0f, 0, "48/3 in e4m3: 0x%02x", y);
    x = 0x7e; /* 448 */
    braid_reduce_avg_prescale(BRAID_FLOAT8_E4M3, &y, &x, 1, 1024);
    cr_assert_float_eq(braid_e4m3_to_float(y), 0.4375f, 0, "448/1024 in e4m3: 0x%02x", y);
    uint16_t h = 0x7880, r = 0; /* float16 36864 */
    braid_reduce_avg_prescale(BRAID_FLOAT16, &r, &h, 1, 3);
    cr_assert_eq(r, 0x7200, "36864/3 in float16: 0x%04x", r); /* 12288 */
}

Test(avg_prescale, count_zero_touches_nothing)
{
    for (size_t d = 0; d < NDTYPES; d++)
        if (is_float(all_dtypes[d])) braid_reduce_avg_prescale(all_dtypes[d], NULL, NULL, 0, 3);
}
