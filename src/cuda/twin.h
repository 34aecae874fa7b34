/* The CPU twin of the device engine (twin.c): runs engine_dev.h's protocol, compiled by the C
 * compiler, with threads as thread blocks against FIFOs in real shared memory (one MAP_SHARED
 * mapping, inherited at the same address by forked ranks). The same plans as the CPU engine
 * (algos/plan.h) are expanded into device steps here, which is also what the GPU executor
 * uploads. Internal; the twin suite (tests/unit/test_twin.c) drives it. */
#ifndef BRAID_CUDA_TWIN_H
#define BRAID_CUDA_TWIN_H

#include "algos/plan.h"
#include "braid/braid.h"
#include "cuda/engine_dev.h"

#include <stddef.h>
#include <stdint.h>

/* Expands channel `channel` of plan p into device steps (peers resolved: ring -> link 0, rank
 * r -> link 1 + r); *steps_p is malloc'ed (NULL when there are none). */
braid_result_t braid_dev_plan_expand(const braid_plan_params_t *p, int channel,
                                     braid_dev_step_t **steps_p, uint32_t *nsteps_p);

typedef struct braid_twin_world braid_twin_world_t;
/* FIFOs for nranks ranks: nchannels rings, and point-to-point links (for the latency plans). */
braid_result_t braid_twin_world_create(int nranks, int nchannels, int nslots, size_t slot_bytes,
                                       braid_twin_world_t **w_p);
void braid_twin_world_destroy(braid_twin_world_t *w);
/* Sets every FIFO's abort word (every waiting channel returns BRAID_DEV_ERR_ABORTED). */
void braid_twin_world_abort(braid_twin_world_t *w);
/* The most messages in flight on any FIFO so far (pipelining). */
uint64_t braid_twin_max_inflight(const braid_twin_world_t *w);

typedef struct {
    int coll; /* braid_coll_t */
    int algo; /* BRAID_PLAN_RING, _RECDBL, _TREE */
    braid_datatype_t dtype;
    braid_redop_t op;
    int root;
    size_t count;
    const void *sendbuf;
    void *recvbuf;
    uint32_t seq;
    const int *order; /* ring order (NULL: identity), as comm->ring_order */
} braid_twin_args_t;

typedef struct braid_twin_rank braid_twin_rank_t;
/* rank's channels for one collective (its plan expanded, its links bound). */
braid_result_t braid_twin_rank_prepare(braid_twin_world_t *w, int rank, const braid_twin_args_t *a,
                                       braid_twin_rank_t **r_p);
/* Runs each unfinished channel once with `budget` polls per wait: 1 when all are done, 0 when
 * some are blocked, or an error (the message names rank, channel, link). */
int braid_twin_rank_poll(braid_twin_rank_t *r, uint64_t budget);
/* Runs the channels as threads (one per channel, as thread blocks) until done; each relaunches
 * its channel after every BLOCKED return. Bounded by timeout_s. */
braid_result_t braid_twin_rank_run_threads(braid_twin_rank_t *r, uint64_t budget, double timeout_s);
/* Relaunches counted over the rank's channels (BLOCKED returns). */
uint64_t braid_twin_rank_waits(const braid_twin_rank_t *r);
void braid_twin_rank_free(braid_twin_rank_t *r);

#endif
