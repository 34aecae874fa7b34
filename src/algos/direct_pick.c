/* Streaming or plain stores for the direct collectives' copies into their slots, measured
 * (BRAID_DIRECT_NT_SLOTS=auto; algos/direct.h, core/ntpick.h). One picker per collective and
 * size class lives in the communicator's direct state (transport/shm_direct.h); its events are
 * the blocks of those calls, which every rank runs alike, so every rank's picker counts the
 * same events and takes the same kind in the schedule's fixed runs; between them every rank
 * takes the kind that the runs' figures, published in every rank's segment and summed, favour. */
#include "algos/direct.h"
#include "core/log.h"
#include "transport/shm_direct.h"

enum { CLASSES = BRAID_DIRECT_PICKERS / 5 };

/* The picker index of a collective's calls of `bytes` (count * dtype size, equal on every
 * rank): 5 collectives x log2 classes from BRAID_NT_PICK_MIN; -1 for other collectives. */
static int picker_index(braid_coll_t coll, size_t bytes)
{
    int k;
    switch (coll) {
    case BRAID_COLL_ALLREDUCE:
        k = 0;
        break;
    case BRAID_COLL_REDUCE_SCATTER:
        k = 1;
        break;
    case BRAID_COLL_ALLGATHER:
        k = 2;
        break;
    case BRAID_COLL_BROADCAST:
        k = 3;
        break;
    case BRAID_COLL_REDUCE:
        k = 4;
        break;
    default:
        return -1;
    }
    int cls = 0;
    for (size_t b = bytes / BRAID_NT_PICK_MIN; b > 1 && cls < CLASSES - 1; b >>= 1)
        cls++;
    return k * CLASSES + cls;
}

void braid_direct_pick_init(braid_direct_pick_t *k, struct braid_comm *c, const braid_op_args_t *a)
{
    size_t bytes = a->count * braid_dtype_size(a->dtype);
    *k = (braid_direct_pick_t){.nt = c->direct_nt_slots, .idx = -1};
    if (!c->direct_nt_pick || bytes < BRAID_NT_PICK_MIN) return;
    if ((k->idx = picker_index(a->coll, bytes)) < 0) return;
    k->p = &braid_direct_pickers(c->direct)[k->idx];
    if (!k->p->sched) {
        k->p->sched = &braid_nt_sched_blocks;
        k->p->first = c->direct_nt_slots;
    }
}

/* The kind of a block's copies into the slots, the same on every rank (the measurements need
 * that, and a rank that stored otherwise would slow the others' reads): the picker's fixed
 * runs, else the kind of the lower average, where each run counts with its figures summed
 * over the ranks (a rank's figure alone depends on when it arrives: with 4 ranks on 2 cpus
 * rank 0's own blocks, waits left out or not, favoured plain stores at 1 MiB where every
 * A/B of the whole loop favoured streaming ones; the sum agreed with the A/B, session 22). Every
 * rank publishes its figures of a run when it timed the run's last block, and every rank folds them
 * ADOPT_LAG of the picker's blocks after the run's end, so all fold the same numbers and agree: a
 * rank that begins that block finished the one before, which needed every peer's tag of a later
 * block than the run's last (every block waits for every peer's tag of the block before it, at the
 * latest when its writer begins it, as a broadcast's root does), and a rank publishes when it
 * begins its next block or ends the call, before that tag. Until then the averages before hold
 * (`first` before any). */
#define ADOPT_LAG 3
static int block_kind(const braid_direct_pick_t *k, struct braid_comm *c)
{
    braid_nt_pick_t *p = k->p;
    int f = braid_nt_pick_fixed(p);
    if (f >= 0) return f;
    if (p->folded_at && p->timed >= p->folded_at + ADOPT_LAG && p->adopted_at != p->folded_at) {
        double sum[2] = {0, 0}, m[2];
        for (int r = 0; r < c->nranks; r++)
            if (braid_direct_run_of(c->direct, r, k->idx, p->folded_at, m)) {
                sum[0] += m[0];
                sum[1] += m[1];
            }
        braid_nt_pick_fold(p, sum);
    }
    return braid_nt_pick_best(p);
}

void braid_direct_pick_block(braid_direct_pick_t *k, struct braid_comm *c, size_t bytes)
{
    if (!k->p) return;
    uint64_t now = braid_now_ns();
    if (k->t0) {
        /* The whole block, waits included: a block's waits on one rank are the others' work
         * (with more ranks than cpus, on its own cpu too), and the runs' figures are summed
         * over the ranks. */
        braid_nt_pick_record(k->p, k->nt, k->bytes, now - k->t0);
        if (k->p->folded_at == k->p->timed)
            braid_direct_set_run(c->direct, k->idx, k->p->folded_at, k->p->run_mean);
    }
    k->t0 = bytes != (size_t)-1 ? now : 0;
    k->bytes = bytes;
    if (k->t0) k->nt = block_kind(k, c);
}

void braid_direct_log_picks(struct braid_comm *c)
{
    static const char *const names[5] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                         "reduce"};
    if (!c->direct) return;
    const braid_nt_pick_t *p = braid_direct_pickers(c->direct);
    for (int i = 0; i < BRAID_DIRECT_PICKERS; i++)
        if (i / CLASSES < 5 && p[i].count[0] + p[i].count[1])
            braid_debug(SHM,
                        "direct %s from %zu bytes: plain stores %.2f GB/s (%llu runs), "
                        "streaming %.2f GB/s (%llu), taking %s",
                        names[i / CLASSES], (size_t)BRAID_NT_PICK_MIN << (i % CLASSES),
                        p[i].ns_per_byte[0] > 0 ? 1 / p[i].ns_per_byte[0] : 0.0,
                        (unsigned long long)p[i].count[0],
                        p[i].ns_per_byte[1] > 0 ? 1 / p[i].ns_per_byte[1] : 0.0,
                        (unsigned long long)p[i].count[1],
                        braid_nt_pick_best(&p[i]) ? "streaming" : "plain");
}
