/* Streaming or plain stores for copies into a shared slot, chosen by measuring both
 * (BRAID_P2P_NT_SLOTS=auto: the send slots of the shm transport, one picker per peer).
 *
 * Why measure: on the AMD EPYC VMs this project runs on, a store into a line that a peer on
 * another core has read may wait for that peer's copy to be invalidated. Whether it does
 * changes while a job runs (the hypervisor moves the vCPUs): in one stretch of session 13 the
 * sender's plain copies into a send slot ran at 7 GB/s against 43-46 GB/s with streaming
 * stores, and 2-rank sendrecv of 1 MiB moved 4.4 GB/s with plain stores against 16.7 with
 * streaming ones; in another, plain stores moved 10-13 GB/s at 64 KiB-1 MiB and streaming ones
 * 6.7-8.4 (the receiver then fetches the data from memory instead of from the sender's cache).
 *
 * The rule: copies below BRAID_NT_PICK_MIN bytes use plain stores, untimed. Larger ones are
 * timed; the first BRAID_NT_PICK_WARMUP alternate the two kinds, then the picker takes
 * streaming stores when their time per byte (a moving average) is below 1 / BRAID_NT_PICK_FACTOR
 * of the plain stores' (the sender's copy time does not see the receiver's fetch from memory,
 * hence the margin), and every BRAID_NT_PICK_EXPLORE-th timed copy uses the other kind once, so
 * that a change of the machine's state is seen. */
#ifndef BRAID_CORE_NTPICK_H
#define BRAID_CORE_NTPICK_H

#include <stddef.h>
#include <stdint.h>

#define BRAID_NT_PICK_MIN 16384
#define BRAID_NT_PICK_WARMUP 4
#define BRAID_NT_PICK_EXPLORE 128
#define BRAID_NT_PICK_FACTOR 3.0

typedef struct {
    double ns_per_byte[2]; /* moving average per kind ([0] plain, [1] streaming); 0 = none */
    uint64_t timed;        /* timed copies so far */
    uint64_t count[2];     /* timed copies of each kind (diagnostics, tests) */
} braid_nt_pick_t;

/* The kind (0 plain, 1 streaming) of the next timed copy. */
int braid_nt_pick_choose(const braid_nt_pick_t *p);
/* Records a timed copy of `bytes` bytes of kind nt that took ns nanoseconds. */
void braid_nt_pick_record(braid_nt_pick_t *p, int nt, size_t bytes, uint64_t ns);
/* The kind the picker takes outside exploration (0 before the warm-up ended). */
int braid_nt_pick_best(const braid_nt_pick_t *p);
/* dst <- src (no overlap) for shared memory a peer reads next: plain below
 * BRAID_NT_PICK_MIN, else the picker's kind, timed and recorded; streaming stores end with an
 * sfence, so a release store after the call publishes them. */
void braid_copy_picked(braid_nt_pick_t *p, void *dst, const void *src, size_t n);

#endif
