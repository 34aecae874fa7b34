/* BRAID_DIRECT_NT_SLOTS=auto on the direct collectives as real processes, with more ranks than
 * cpus (algos/direct_pick.c, core/ntpick.h): each block's copies into the slots take one kind,
 * the same on every rank (the schedule's fixed runs, else the averages of the runs' figures
 * summed over the ranks, identical on every rank); after the trial both kinds have been
 * measured; results stay exact through every change of kind (against the reference, unaligned
 * and in place); a forced setting leaves the pickers untouched. */
#include "algos/direct.h"
#include "core/comm.h"
#include "core/ntpick.h"
#include "data.h"
#include "mp.h"
#include "proc.h"
#include "transport/shm_direct.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

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

static int same_kind_everywhere(braid_comm_t comm, int rank, int n, void *arg)
{
    int forced = arg != NULL;
    braid_comm_t c = mp_fake_host_comm(comm, rank, 0, "direct");
    MP_CHECK(rank, c != NULL && ((struct braid_comm *)c)->direct, "no direct segments");
    MP_CHECK(rank, ((struct braid_comm *)c)->direct_nt_pick == !forced, "picking %d",
             ((struct braid_comm *)c)->direct_nt_pick);
    uint64_t before[BRAID_DIRECT_PICKERS] = {0};
    int idx = -1, seed = 3, folded = 0;
    /* 40 calls of 64 KiB + 12 B (its size class; one block, or five of 16 KiB): the first
     * kind, the trial, the expected kind until every rank folded the trial's figures, then
     * the kind they favour; every 5th in place, every 3rd unaligned. The kind of each call's last
     * block is compared. */
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
        if (!p->adopted_at) continue;
        /* A run was folded: every rank saw both kinds measured and holds the same averages
         * (the runs' figures summed over the ranks), bit for bit. */
        MP_CHECK(rank, p->count[0] >= 1 && p->count[1] >= 1,
                 "call %d: %llu plain and %llu streaming runs averaged", i,
                 (unsigned long long)p->count[0], (unsigned long long)p->count[1]);
        double avg[16] = {0};
        MP_OK(rank, braid_allgather(p->ns_per_byte, avg, 2, BRAID_FLOAT64, c));
        for (int r = 0; r < n; r++)
            MP_CHECK(rank, !memcmp(&avg[2 * r], avg, 2 * sizeof(double)),
                     "call %d: rank %d averages %g / %g, rank 0 %g / %g", i, r, avg[2 * r],
                     avg[2 * r + 1], avg[0], avg[1]);
        folded++;
    }
    MP_CHECK(rank, forced || folded > 0, "no run folded in 40 calls");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

/* Every rank of the jobs below on one cpu (the children inherit it): more ranks than cpus,
 * where auto measures on every x86-64 CPU. */
static cpu_set_t one_cpu(void)
{
    cpu_set_t was;
    cr_assert_eq(proc_pin_first_cpu(&was), 0);
    return was;
}

Test(direct_pick, every_rank_stores_the_same_kind_and_results_stay_exact)
{
#if !defined(__x86_64__)
    cr_skip_test("streaming stores are x86-64 only");
#endif
    unsetenv("BRAID_DIRECT_NT_SLOTS");
    cpu_set_t was = one_cpu();
    for (int n = 2; n <= 4; n++)
        cr_assert_eq(mp_run(n, same_kind_everywhere, NULL, 200), 0, "n=%d (see stderr)", n);
    setenv("BRAID_DIRECT_BLOCK", "16384", 1);
    for (int n = 2; n <= 3; n++)
        cr_assert_eq(mp_run(n, same_kind_everywhere, NULL, 200), 0, "n=%d, blocks of 16 KiB", n);
    unsetenv("BRAID_DIRECT_BLOCK");
    sched_setaffinity(0, sizeof(was), &was);
}

Test(direct_pick, a_forced_kind_times_nothing)
{
    const char *modes[] = {"0", "1"};
    int forced = 1;
    for (int m = 0; m < 2; m++) {
        setenv("BRAID_DIRECT_NT_SLOTS", modes[m], 1);
        cr_assert_eq(mp_run(3, same_kind_everywhere, &forced, 200), 0, "BRAID_DIRECT_NT_SLOTS=%s",
                     modes[m]);
    }
    unsetenv("BRAID_DIRECT_NT_SLOTS");
}
