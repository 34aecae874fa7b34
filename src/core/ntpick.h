/* Streaming or plain stores for copies into a shared slot, chosen by measuring both
 * (BRAID_P2P_NT_SLOTS=auto: the send slots of the shm transport, one picker per peer; the
 * direct collectives' slots use the same picker on a shared schedule, braid_nt_sched_blocks
 * below and algos/direct_pick.c). The rest of this comment is about the send slots.
 *
 * Why measure: on the AMD EPYC VMs this project runs on, a store into a line that a peer on
 * another core has read may wait for that peer's copy to be invalidated. Whether it does
 * changes while a job runs (the hypervisor moves the vCPUs): in one stretch of session 13 the
 * sender's plain copies into a send slot ran at 7 GB/s against 43-46 GB/s with streaming
 * stores, and 2-rank sendrecv of 1 MiB moved 4.4 GB/s with plain stores against 16.7 with
 * streaming ones; in another, plain stores moved 10-13 GB/s at 64 KiB-1 MiB and streaming ones
 * 6.7-8.4 (the receiver then fetches the data from memory instead of from the sender's cache).
 *
 * The sender's copy is half of the cost: the receiver's copy out of the slot reads the lines
 * from the sender's cache (plain stores) or from memory (streaming ones), and in session 14 a
 * sender that timed its streaming copies at only 1.6x its plain ones kept plain stores while
 * forcing streaming ones made 2-rank sendrecv of 1 MiB 3.8x faster. So the receiver times its
 * copies out too, per kind (the message's BRAID_MSG_NT flag says which), and reports its moving
 * average back through the connection (braid_shm_rx_cost_set); the sender adds it to its own.
 *
 * A kind is measured in runs: the first copies after a change of kind write slots whose lines
 * the other kind left in another state (a lone streaming copy among plain ones ran at 5 GB/s,
 * the same copies in a run at 50), and so do the receiver's first copies out. With the first
 * copies of a run timed, a picker that had started on plain stores never saw the streaming
 * ones' speed (session 14: half of the runs of a sweep stuck at 4 GB/s instead of 10).
 *
 * The rule: copies below BRAID_NT_PICK_MIN bytes use plain stores, untimed. Larger ones count:
 * the first 2 * BRAID_NT_PICK_TRIAL are a run of plain stores, then a run of streaming ones;
 * then the picker takes the kind of the lower sender + receiver time per byte (moving
 * averages) once the receiver has reported both kinds, and until then streaming stores only
 * when the sender's own time for them is below 1 / BRAID_NT_PICK_FACTOR of the plain stores'
 * (the margin stands for the receiver's unseen part). The first BRAID_NT_PICK_TRIAL copies of
 * every BRAID_NT_PICK_EXPLORE are a run of the other kind, so that a change of the machine's
 * state is seen, and so are those from copy 64, 128, 256 and 512 (BRAID_NT_PICK_EARLY runs):
 * the warm-up meets cold slots and buffers, and a choice it misled was otherwise kept for
 * about a thousand copies (session 14: most of a sweep on the slower kind). Only copies past the
 * first BRAID_NT_PICK_SKIP of a run of one kind enter the averages, on both ends (the rings of the
 * send/recv connections have 4 slots up to 16 ranks), each at most BRAID_NT_PICK_CLIP times its
 * kind's average: one slow copy (a preemption) moved the average without bound and could turn a
 * picker to the other kind until that kind's next run, up to BRAID_NT_PICK_EXPLORE copies
 * (session 36, a day plain stores cost 2-2.9x: sendrecv over the slots 1.05-1.18x slower
 * without the clip, 7 rounds). A clipped copy still moves its average by 1.75x, so one slow
 * copy can still turn a picker whose margin is below that; and a kind whose copies are often
 * more than 4x its average is counted cheaper than it is (10% at 10x: 0.146 for a mean of
 * 0.190), the price of not counting preemptions. */
#ifndef BRAID_CORE_NTPICK_H
#define BRAID_CORE_NTPICK_H

#include <stddef.h>
#include <stdint.h>

#define BRAID_NT_PICK_MIN 16384
#define BRAID_NT_PICK_TRIAL 16
#define BRAID_NT_PICK_SKIP 8
#define BRAID_NT_PICK_EXPLORE 1024
#define BRAID_NT_PICK_EARLY 4 /* explorations before the first BRAID_NT_PICK_EXPLORE copies */
#define BRAID_NT_PICK_FACTOR 3.0
#define BRAID_NT_PICK_CLIP 4.0 /* a sample counts at most 4x its kind's average */

/* A picker's schedule: runs of `trial` timed events of one kind, the first `skip` of each run
 * out of the averages, an exploration run every `explore` events and `early` ones before (at
 * 4 * trial, then at twice the last);
 * streaming stores need `factor` times plain stores' speed while the receiver has not reported
 * (1: the events time everything). The send slots' pickers time copies
 * (braid_nt_sched_copies: the BRAID_NT_PICK_* values above); the direct collectives' time the
 * blocks of the calls of one collective and size class (braid_nt_sched_blocks,
 * algos/direct.c), where a run is shorter since a block is larger and every rank follows the
 * same schedule. */
typedef struct {
    uint32_t trial, skip, explore, early;
    double factor;
    int shared;     /* the exploration runs measure both kinds in a fixed order (see ntpick.c) */
    uint32_t start; /* events before the trial, which take `first` (shared schedules) */
} braid_nt_sched_t;
extern const braid_nt_sched_t braid_nt_sched_copies;
extern const braid_nt_sched_t braid_nt_sched_blocks;

typedef struct braid_nt_pick {
    const braid_nt_sched_t *sched; /* NULL: braid_nt_sched_copies */
    /* The kind expected to win, taken until both are measured: the trial's first run (the
     * second is the other kind); with a shared schedule the fixed runs take it second. */
    int first;
    double ns_per_byte[2]; /* moving average per kind ([0] plain, [1] streaming); 0 = none */
    uint64_t timed;        /* copies of at least BRAID_NT_PICK_MIN bytes so far */
    uint64_t count[2];     /* copies (runs when shared) of each kind in the averages */
    double run_sum[2], run_max[2]; /* a shared schedule: each kind's events in this run */
    uint32_t run_n[2];
    double run_mean[2];       /* a shared schedule: each kind's figure of the last run */
    uint64_t folded_at;       /* a shared schedule: `timed` when the last run ended */
    uint64_t adopted_at;      /* the folded_at braid_nt_pick_fold last folded */
    double rx_ns_per_byte[2]; /* the receiver's copy out per kind, as it last reported; 0 = none */
    uint32_t run;             /* copies of the last one's kind in a row */
    int last;                 /* the last copy's kind */
} braid_nt_pick_t;

/* The kind (0 plain, 1 streaming) of the next timed copy. It depends only on the events
 * recorded so far and, outside the trial and exploration runs, on the averages. */
int braid_nt_pick_choose(const braid_nt_pick_t *p);
/* The kind of the next event when a run of the schedule fixes it (the trial, a shared
 * schedule's exploration runs: the same on every rank that recorded as many events), else -1. */
int braid_nt_pick_fixed(const braid_nt_pick_t *p);
/* A shared schedule: adds the run that ended at folded_at to the averages, each kind's
 * run_mean summed over the ranks (sum; 0: none). Every rank that folds the same sums in the
 * same order takes the same kind afterwards (braid_nt_pick_best). */
void braid_nt_pick_fold(braid_nt_pick_t *p, const double sum[2]);
/* Records a timed copy of `bytes` bytes of kind nt that took ns nanoseconds (into the
 * averages past the first BRAID_NT_PICK_SKIP of a run). */
void braid_nt_pick_record(braid_nt_pick_t *p, int nt, size_t bytes, uint64_t ns);
/* The kind the picker takes outside exploration (0 until both kinds are in the averages). */
int braid_nt_pick_best(const braid_nt_pick_t *p);
/* dst <- src (no overlap) for shared memory a peer reads next: plain below
 * BRAID_NT_PICK_MIN, else the picker's kind, timed and recorded; streaming stores end with an
 * sfence, so a release store after the call publishes them. Returns 1 when it used streaming
 * stores. */
int braid_copy_picked(braid_nt_pick_t *p, void *dst, const void *src, size_t n);
/* The receiving end: dst <- src (a slot written with streaming stores when nt), timed into rx
 * (a picker's averages used as the receiver's) from BRAID_NT_PICK_MIN bytes; returns the
 * average of that kind in picoseconds per byte (0 when untimed), for the sender. */
uint64_t braid_copy_from_picked(braid_nt_pick_t *rx, void *dst, const void *src, size_t n, int nt);

#endif
