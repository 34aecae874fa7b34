/* Streaming or plain stores for the direct collectives' copies into their slots, measured
 * (BRAID_DIRECT_NT_SLOTS=auto; algos/direct.h, core/ntpick.h). One picker per collective and
 * size class lives in the communicator's direct state (transport/shm_direct.h); its events are
 * the blocks of those calls, which every rank runs alike, so every rank's picker counts the
 * same events and takes the same kind in the schedule's fixed runs. Between them every rank
 * takes rank 0's choice, published in rank 0's segment. */
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
 * runs, else rank 0's choice after the last run, which it publishes once it timed the run's
 * last block. Every rank (rank 0 too) takes it up ADOPT_LAG of the picker's blocks after that
 * run's end: a rank that begins that block finished the one before, which needed rank 0's tag
 * of a later block than the run's last (every block waits for every peer's tag of the block
 * before it, at the latest when its writer begins it, as a broadcast's root does), and rank 0
 * publishes when it begins its next block or ends the call, before that tag. Until then the
 * choice of the run before holds (`first` before any). */
#define ADOPT_LAG 3
static int block_kind(const braid_direct_pick_t *k, braid_direct_t *d)
{
    braid_nt_pick_t *p = k->p;
    int f = braid_nt_pick_fixed(p);
    if (f >= 0) return f;
    if (p->folded_at && p->timed >= p->folded_at + ADOPT_LAG && p->adopted_at != p->folded_at) {
        f = braid_direct_pick_of(d, 0, k->idx);
        p->adopted = f >= 0 ? f : p->first;
        p->adopted_at = p->folded_at;
    }
    return p->adopted_at ? p->adopted : p->first;
}

void braid_direct_pick_block(braid_direct_pick_t *k, struct braid_comm *c, size_t bytes)
{
    if (!k->p) return;
    uint64_t now = braid_now_ns();
    if (k->t0) {
        braid_nt_pick_record(k->p, k->nt, k->bytes, now - k->t0);
        if (c->rank == 0) braid_direct_set_pick(c->direct, k->idx, braid_nt_pick_best(k->p));
    }
    k->t0 = bytes != (size_t)-1 ? now : 0;
    k->bytes = bytes;
    if (k->t0) k->nt = block_kind(k, c->direct);
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
