/* BRAID_DIRECT_NT_SLOTS=auto on the direct collectives as real processes (algos/direct.c,
 * core/ntpick.h): each call's copies into the slots take one kind, the same on every rank (the
 * schedule's fixed runs, else rank 0's published choice); after the trial both kinds have been
 * measured; results stay exact through every change of kind (against the reference, unaligned
 * and in place); a forced setting leaves the pickers untouched. */
#include "algos/direct.h"
#include "core/comm.h"
#include "core/ntpick.h"
#include "data.h"
#include "mp.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <stdlib.h>

TestSuite(direct_pick, .timeout = 300);

/* The picker that timed the last call, found as the one whose count of timed calls moved. */
static const braid_nt_pick_t *moved(braid_comm_t c, uint64_t *before, int *idx_p)
{
    braid_nt_pick_t *p = braid_direct_pickers(((struct braid_comm *)c)->direct);
    const braid_nt_pick_t *hit = NULL;
    for (int i = 0; i < BRAID_DIRECT_PICKERS; i++) {
        if (p[i].timed != before[i] && !hit) {
            hit = &p[i];
            *idx_p = i;
        }
        before[i] = p[i].timed;
    }
    return hit;
}

static int follows_rank_0(braid_comm_t comm, int rank, int n, void *arg)
{
    int forced = arg != NULL;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && ((struct braid_comm *)c)->direct, "no direct segments");
    MP_CHECK(rank, ((struct braid_comm *)c)->direct_nt_pick == !forced, "picking %d",
             ((struct braid_comm *)c)->direct_nt_pick);
    uint64_t before[BRAID_DIRECT_PICKERS] = {0};
    int idx = -1, seed = 3;
    /* 40 calls of 64 KiB + 12 B (its size class; one block, or five of 16 KiB): the first
     * kind, the trial, the expected kind until rank 0's choice is taken up, then that; every
     * 5th in place, every 3rd unaligned. The kind of each call's last block is compared. */
    for (int i = 0; i < 40; i++) {
        size_t count = 16387;
        braid_redop_t op = i % 2 ? BRAID_SUM : BRAID_MAX;
        if (data_check_allreduce(c, rank, n, BRAID_FLOAT32, op, count, i % 5 == 0,
                                 i % 3 == 1 ? 4 : 0, seed++, "auto slots"))
            return 1;
        const braid_nt_pick_t *p = moved(c, before, &idx);
        if (forced) {
            MP_CHECK(rank, p == NULL, "call %d: a picker timed a forced call", i);
            continue;
        }
        MP_CHECK(rank, p != NULL, "call %d: no picker timed it", i);
        int32_t kind = p->last, kinds[8] = {0}, idxs[8] = {0}, me = idx;
        MP_OK(rank, braid_allgather(&kind, kinds, 1, BRAID_INT32, c));
        MP_OK(rank, braid_allgather(&me, idxs, 1, BRAID_INT32, c));
        for (int r = 0; r < n; r++) {
            MP_CHECK(rank, idxs[r] == idx, "call %d: rank %d timed picker %d, rank %d %d", i, r,
                     idxs[r], rank, idx);
            MP_CHECK(rank, kinds[r] == kinds[0], "call %d: rank %d stored %s, rank 0 %s", i, r,
                     kinds[r] ? "streaming" : "plain", kinds[0] ? "streaming" : "plain");
        }
        const braid_nt_sched_t *k = &braid_nt_sched_blocks;
        if (p->timed >= k->start + 2 * k->trial)
            MP_CHECK(rank, p->count[0] >= 1 && p->count[1] >= 1,
                     "after the trial (%llu blocks): %llu plain and %llu streaming runs averaged",
                     (unsigned long long)p->timed, (unsigned long long)p->count[0],
                     (unsigned long long)p->count[1]);
        /* Rank 0 publishes its average's choice. */
        if (rank == 0 && p->folded_at)
            MP_CHECK(rank,
                     braid_direct_pick_of(((struct braid_comm *)c)->direct, 0, idx) ==
                         braid_nt_pick_best(p),
                     "call %d: published %d", i,
                     braid_direct_pick_of(((struct braid_comm *)c)->direct, 0, idx));
    }
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

Test(direct_pick, every_rank_stores_the_same_kind_and_results_stay_exact)
{
    unsetenv("BRAID_DIRECT_NT_SLOTS");
    for (int n = 2; n <= 4; n++)
        cr_assert_eq(mp_run(n, follows_rank_0, NULL, 200), 0, "n=%d (see stderr)", n);
    setenv("BRAID_DIRECT_BLOCK", "16384", 1);
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, follows_rank_0, NULL, 200), 0, "n=%d, blocks of 16 KiB", n);
    unsetenv("BRAID_DIRECT_BLOCK");
}

Test(direct_pick, a_forced_kind_times_nothing)
{
    const char *modes[] = {"0", "1"};
    int forced = 1;
    for (int m = 0; m < 2; m++) {
        setenv("BRAID_DIRECT_NT_SLOTS", modes[m], 1);
        cr_assert_eq(mp_run(3, follows_rank_0, &forced, 200), 0, "BRAID_DIRECT_NT_SLOTS=%s",
                     modes[m]);
    }
    unsetenv("BRAID_DIRECT_NT_SLOTS");
}
