/* The tests' own data helpers (tests/common/data.c): the block-wise comparison finds and
 * counts every wrong element (at block edges, unaligned, every dtype), and the reference
 * agrees with a sum computed here from data_value. */
#include "data.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1100 /* more than two of the comparison's 512-element blocks */

static void expected_buffer(unsigned char *buf, braid_datatype_t dt, braid_redop_t op, int n,
                            size_t count, int seed)
{
    size_t es = braid_dtype_size(dt);
    for (size_t k = 0; k < count; k++)
        data_expected(buf + k * es, dt, op, n, k, seed);
}

Test(data, check_counts_each_wrong_element_every_dtype_unaligned)
{
    const size_t wrong[] = {0, 511, 512, COUNT - 1};
    for (int dt = 0; dt < BRAID_NUM_DTYPES; dt++) {
        size_t es = braid_dtype_size(dt);
        unsigned char *raw = malloc(COUNT * es + 3), *buf = raw + 3;
        cr_assert(raw);
        expected_buffer(buf, dt, BRAID_SUM, 3, COUNT, 7);
        cr_expect_eq(data_check_reduced(buf, dt, BRAID_SUM, 3, 0, COUNT, 7, "data"), 0, "%s",
                     braid_dtype_name(dt));
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
            buf[wrong[i] * es + es - 1] ^= 0x40; /* the element's last byte */
            cr_expect_eq(
                data_check_reduced(buf, dt, BRAID_SUM, 3, 0, COUNT, 7, "data (on purpose)"), i + 1,
                "%s: %zu wrong", braid_dtype_name(dt), i + 1);
        }
        /* a wrong element in the first few: data_check_rank against rank 1's inputs */
        data_fill(buf, dt, BRAID_MAX, 1, 5, COUNT, 9);
        cr_expect_eq(data_check_rank(buf, dt, BRAID_MAX, 1, 5, COUNT, 9, "data"), 0, "%s",
                     braid_dtype_name(dt));
        buf[600 * es] ^= 0x01;
        cr_expect_eq(data_check_rank(buf, dt, BRAID_MAX, 1, 5, COUNT, 9, "data (on purpose)"), 1,
                     "%s", braid_dtype_name(dt));
        cr_expect_eq(data_check_rank(buf, dt, BRAID_MAX, 2, 5, COUNT, 9, "data (on purpose)") > 0,
                     1, "%s: another rank's inputs", braid_dtype_name(dt));
        free(raw);
    }
}

/* int32 sums computed here from data_value, stored as int32: the reference's result */
Test(data, reference_sum_matches_the_values)
{
    for (int n = 1; n <= 8; n++)
        for (size_t k = 0; k < COUNT; k++) {
            int64_t sum = 0;
            for (int r = 0; r < n; r++)
                sum += (int64_t)data_value(BRAID_INT32, BRAID_SUM, r, k, 11);
            int32_t want = (int32_t)sum, got;
            data_expected(&got, BRAID_INT32, BRAID_SUM, n, k, 11);
            cr_assert_eq(got, want, "n=%d index %zu", n, k);
        }
}
