/* The CPU twin of the device engine (twin.c): runs engine_dev.h's protocol, compiled by the C
 * compiler, with threads as thread blocks against FIFOs in real shared memory (one MAP_SHARED
 * mapping, inherited at the same address by forked ranks). The same plans as the CPU engine
 * (algos/plan.h) are expanded into device steps here, which is also what the GPU executor
 * uploads. Internal; the twin suite (tests/unit/test_twin.c) drives it. */
#ifndef BRAID_CUDA_TWIN_H
#define BRAID_CUDA_TWIN_H

#include "algos/plan.h"
#include "braid/braid.h"
#include "cuda/devplan.h"
#include "cuda/engine_dev.h"

#include <stddef.h>
#include <stdint.h>

typedef struct braid_twin_world braid_twin_world_t;
/* Regions for nranks ranks (devplan.h's layout: nchannels rings of nblk lanes each, and
 * point-to-point FIFOs for the latency plans) in one shared mapping. */
braid_result_t braid_twin_world_create(int nranks, int nchannels, int nblk, int nslots,
                                       size_t slot_bytes, braid_twin_world_t **w_p);
void braid_twin_world_destroy(braid_twin_world_t *w);
/* Sets every FIFO's in-band abort word (every waiting lane returns BRAID_DEV_ERR_ABORTED, which
 * the host loop reports as a failed peer: BRAID_ERR_REMOTE). */
void braid_twin_world_abort(braid_twin_world_t *w);
/* Sets rank's own abort word (its waiting lanes stop: BRAID_ERR_ABORTED). */
void braid_twin_rank_abort(braid_twin_world_t *w, int rank);
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
/* rank's lanes for one collective (its plan expanded, its links bound: devplan.h's image,
 * which the GPU executor copies to the device as is). */
braid_result_t braid_twin_rank_prepare(braid_twin_world_t *w, int rank, const braid_twin_args_t *a,
                                       braid_twin_rank_t **r_p);
/* One step of the shared host loop (devdrive.h): runs each unfinished lane once with `budget`
 * polls per wait: 1 when all are done, 0 when some are blocked, or an error (the message names
 * rank, channel, link). timeout_s: no progress for this long is BRAID_ERR_TIMEOUT (0: none). */
int braid_twin_rank_poll(braid_twin_rank_t *r, uint64_t budget);
void braid_twin_rank_set_timeout(braid_twin_rank_t *r, double timeout_s);
/* The shared host loop until done, each launch running the lanes as threads (one per lane, as
 * the thread blocks of a kernel launch) once. Bounded by timeout_s without progress. */
braid_result_t braid_twin_rank_run_threads(braid_twin_rank_t *r, uint64_t budget, double timeout_s);
/* Relaunches counted over the rank's channels (BLOCKED returns). */
uint64_t braid_twin_rank_waits(const braid_twin_rank_t *r);
void braid_twin_rank_free(braid_twin_rank_t *r);

#endif
