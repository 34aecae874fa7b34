/* The measured choice between single copy and the slots (braid_p2p_cma_pick, p2p_cma.h): the
 * trial alternates until both paths are measured, then the cheaper path with an exploration
 * of the other whose interval keeps its extra time near the budget. */
#include "core/p2p_cma.h"

#include <criterion/criterion.h>

Test(cma_pick, trial_alternates_from_single_copy_until_both_are_measured)
{
    for (uint64_t s = 0; s < BRAID_CMA_PICK_TRIAL; s++) {
        cr_expect_eq(braid_p2p_cma_pick(s, 0, 0, 0), !(s & 1), "message %llu, none measured",
                     (unsigned long long)s);
        cr_expect_eq(braid_p2p_cma_pick(s, 100, 0, 0), !(s & 1), "message %llu, slots only",
                     (unsigned long long)s);
        cr_expect_eq(braid_p2p_cma_pick(s, 0, 100, 0), !(s & 1), "message %llu, single copy only",
                     (unsigned long long)s);
    }
    /* after the trial, one path measured: that one; none: single copy */
    cr_expect_eq(braid_p2p_cma_pick(BRAID_CMA_PICK_TRIAL, 100, 0, 0), 0);
    cr_expect_eq(braid_p2p_cma_pick(BRAID_CMA_PICK_TRIAL, 0, 100, 0), 1);
    cr_expect_eq(braid_p2p_cma_pick(BRAID_CMA_PICK_TRIAL + 5, 0, 0, 0), 1);
}

/* How many of messages [from, from + n) take the single copy. */
static unsigned cma_count(uint64_t from, unsigned n, uint64_t slots, uint64_t cma, uint32_t samples)
{
    unsigned k = 0;
    for (uint64_t s = from; s < from + n; s++)
        k += (unsigned)braid_p2p_cma_pick(s, slots, cma, samples);
    return k;
}

Test(cma_pick, cheaper_path_with_one_exploration_per_interval)
{
    /* within 1 + 32 x 2% of each other: one message in 32 explores */
    cr_expect_eq(cma_count(0, 3200, 120, 100, 100), 3200 - 100, "single copy cheaper");
    cr_expect_eq(cma_count(0, 3200, 100, 120, 100), 100, "slots cheaper");
    cr_expect_eq(cma_count(0, 3200, 100, 100, 100), 3200 - 100, "a tie takes single copy");
    /* 4x apart: (4 - 1) / 2% = one in 150 */
    cr_expect_eq(cma_count(0, 15000, 400, 100, 100), 15000 - 100, "single copy 4x cheaper");
    cr_expect_eq(cma_count(0, 15000, 100, 400, 100), 100, "slots 4x cheaper");
    /* 2x apart: one in 50 (not 32: 1 / 32 would cost 3%) */
    cr_expect_eq(cma_count(0, 5000, 200, 100, 100), 5000 - 100, "single copy 2x cheaper");
    /* 1000x apart: capped at one in BRAID_CMA_PICK_EXPLORE_MAX */
    cr_expect_eq(cma_count(0, 2 * BRAID_CMA_PICK_EXPLORE_MAX, 1, 1000, 100), 2,
                 "slots far cheaper");
    /* a path with fewer than BRAID_CMA_PICK_SETTLE messages: at most 256 apart */
    cr_expect_eq(cma_count(0, 2560, 1, 1000, BRAID_CMA_PICK_SETTLE - 1), 10, "few samples");
    cr_expect_eq(cma_count(0, 2560, 1000, 1, 0), 2560 - 10, "no samples yet");
    cr_expect_eq(cma_count(0, 3200, 100, 120, 0), 100, "few samples, close: every 32");
}
