/* Runs one collective's plan on a communicator's connections (see engine.c). */
#ifndef BRAID_CORE_ENGINE_H
#define BRAID_CORE_ENGINE_H

#include "core/comm.h"

/* Runs a->coll to completion on the calling thread; seq is the collective's sequence number.
 * The caller has validated the arguments. */
braid_result_t braid_engine_run(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq);
/* The same with the plan family algo (BRAID_PLAN_* in algos/plan.h); latency plans run on one
 * channel over the point-to-point connections with chunks of comm->p2p_chunk_bytes. */
braid_result_t braid_engine_run_plan(struct braid_comm *comm, const braid_op_args_t *a,
                                     uint32_t seq, int algo);

#endif
