/* The host side of the device engine that the GPU executor (executor.c) and the CPU twin
 * (twin.c) share, so the twin suite tests the code the GPU runs with: where each FIFO lives in
 * its receiver's region, how a plan's steps become lanes' device steps, how a rank's lanes are
 * bound to FIFOs, and the launch image (lanes, FIFO descriptors, steps in one buffer that the
 * executor copies to the device as is).
 *
 * Lanes. A channel of the plan runs on a group of `nblk` lanes (thread blocks on the GPU,
 * threads in the twin's threaded runs): lane (c, b) runs every step of channel c on part b of
 * the step's elements (the elements split into nblk parts at 16-byte boundaries, so each part
 * keeps the vector accesses), over FIFOs of its own, so the blocks of a group never wait for
 * each other. Sender and receiver of a message split it the same way (they see the same step
 * count), which keeps part b of every message on FIFO lane b.
 *
 * Regions. Each rank's incoming FIFOs live in one region of its memory (device memory exported
 * by CUDA IPC, transport/cuda_ipc.c; one shared mapping in the twin): the ring FIFO of lane
 * (c, b) from the ring predecessor, then the point-to-point FIFOs of lanes (0, b) from each rank
 * (the latency plans run on channel 0). A FIFO is its control block (engine_dev.h) followed by
 * its slots. The sender writes the slots and head of the FIFO in the receiver's region; the
 * receiver writes tail there and the sender polls it. */
#ifndef BRAID_CUDA_DEVPLAN_H
#define BRAID_CUDA_DEVPLAN_H

#include "algos/plan.h"
#include "braid/braid.h"
#include "cuda/engine_dev.h"

#include <stddef.h>
#include <stdint.h>

#define BRAID_DEV_MAX_LANES 64

typedef struct {
    int nranks;
    int nch, nblk;         /* channels, lanes per channel */
    int nslots, p2p_slots; /* slots per ring FIFO / point-to-point FIFO */
    size_t slot_bytes;     /* bytes per slot (a lane's part of one chunk), multiple of 16 */
    size_t ring_fifo_bytes, p2p_fifo_bytes;
    size_t region_bytes; /* one rank's region */
} braid_dev_layout_t;

/* Checks the shape (an error names the bad value) and computes the region layout. */
braid_result_t braid_dev_layout_init(braid_dev_layout_t *L, int nranks, int nch, int nblk,
                                     int nslots, int p2p_slots, size_t slot_bytes);
/* BRAID_DEV_THREADS, the engine kernel's threads per block: a multiple of 32 (whole warps)
 * from 32 to 512 (its __launch_bounds__); an error naming the value otherwise, at setup. */
braid_result_t braid_dev_threads_check(int64_t threads);
/* Offsets in the receiver's region of the ring FIFO of lane (c, b) and of the point-to-point
 * FIFO of lane (0, b) from rank `from`. */
size_t braid_dev_layout_ring_off(const braid_dev_layout_t *L, int c, int b);
size_t braid_dev_layout_p2p_off(const braid_dev_layout_t *L, int from, int b);
/* Zeroes the control blocks of a region (the host view `region`; slots are left as they are). */
void braid_dev_region_init_host(const braid_dev_layout_t *L, void *region);

/* Channel `channel` of plan p expanded into device steps for lane part `part` of nparts (peers
 * resolved: ring -> link 0, rank r -> link 1 + r; each step's elements split at multiples of
 * 16 bytes of es-byte elements); *steps_p is malloc'ed (NULL when there are none). */
braid_result_t braid_dev_plan_expand(const braid_plan_params_t *p, int channel, int part,
                                     int nparts, size_t es, braid_dev_step_t **steps_p,
                                     uint32_t *nsteps_p);

/* One collective as the device engine runs it (buffers as the engine sees them). */
typedef struct {
    int coll; /* braid_coll_t */
    int algo; /* BRAID_PLAN_RING, _RECDBL, _TREE */
    braid_datatype_t dtype;
    braid_redop_t op;
    int root;
    size_t count;
    const void *sendbuf;
    void *recvbuf;
    void *scratch;    /* tree reduce on a non-root rank: count elements to accumulate in */
    uint32_t seq;     /* the collective's sequence number (the slots' tags) */
    const int *order; /* ring order (NULL: identity), as comm->ring_order */
} braid_dev_call_t;

/* Whether call needs scratch on this rank (the tree reduce accumulates in the output, which
 * only the root has, as core/engine.c). */
int braid_dev_call_needs_scratch(const braid_dev_call_t *a, int nranks, int rank);

/* BRAID_AVG of float16/bfloat16 (braid_reduce_avg_prescales) runs as the sum of inputs
 * pre-scaled by 1/nranks (as on the host, core/redop.h). For such a call: turns it into the sum and
 * returns how many input elements the caller must scale (braid_reduce_avg_prescale, or the GPU's
 * kernel of it) into the buffer it then points call->sendbuf at: the receive buffer where the rank
 * has one as big as the input (*into_recv_p = 1: all-reduce, a reduce's root), else a buffer of its
 * own. Returns 0 for every other call (unchanged). */
size_t braid_dev_call_avg_prescale(braid_dev_call_t *call, int nranks, int rank, int *into_recv_p);

/* The FIFO counters of a rank's lanes, carried from one collective to the next: posted
 * (messages sent) and consumed (messages received) per lane and link. */
typedef struct {
    uint64_t posted[BRAID_DEV_MAX_LANES][BRAID_DEV_MAX_LINKS];
    uint64_t consumed[BRAID_DEV_MAX_LANES][BRAID_DEV_MAX_LINKS];
} braid_dev_counters_t;

/* A rank's launch image: lanes (braid_dev_chan_t[nlanes], first), their FIFO descriptors and
 * steps, in one malloc'ed buffer whose internal pointers are valid where the engine sees the
 * image (braid_dev_image_relocate). */
typedef struct {
    char *host;     /* the buffer */
    size_t bytes;   /* its size */
    int nlanes;     /* lanes with work (chans[0..nlanes)) */
    uintptr_t base; /* where its pointers point now */
} braid_dev_image_t;

static inline braid_dev_chan_t *braid_dev_image_chans(const braid_dev_image_t *img)
{
    return (braid_dev_chan_t *)(void *)img->host;
}

/* Builds rank's image for call a: the plan (a->algo) expanded for every lane, each lane bound
 * to its FIFOs: regions[r] is rank r's region as the engine addresses it (its own region and
 * the peers' it writes to), counters continue from ctr, abort is the rank's abort word and
 * reports[l] lane l's report (engine addresses, may be NULL). Pointers are relative to the
 * image (base 0) until braid_dev_image_relocate. */
braid_result_t braid_dev_image_build(const braid_dev_layout_t *L, int rank,
                                     const braid_dev_call_t *a, char *const *regions,
                                     const braid_dev_counters_t *ctr, const uint64_t *abort,
                                     braid_dev_report_t *reports, braid_dev_image_t *img);
/* Makes the image's internal pointers point into a copy of it at base (the device buffer the
 * executor copies it to; img->host itself for the twin). */
void braid_dev_image_relocate(braid_dev_image_t *img, uintptr_t base);
/* After a completed run: the counters the next collective continues from (chans: the lanes as
 * the run left them, in the image's layout). */
void braid_dev_image_save(const braid_dev_image_t *img, const braid_dev_chan_t *chans,
                          braid_dev_counters_t *ctr);
void braid_dev_image_free(braid_dev_image_t *img);

/* Resets n lane reports (host view) before a run: blocked at step 0. */
void braid_dev_reports_reset(braid_dev_report_t *r, int n);

/* The rank at the other end of link l of a lane (ring: send -> next, recv -> previous ring
 * rank; p2p: the rank), for messages. */
int braid_dev_link_peer(int link, int is_send, int nranks, int rank, const int *order);

#endif
