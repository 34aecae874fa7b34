/* Runs one collective's plan on a communicator's connections (see engine.c). */
#ifndef BRAID_CORE_ENGINE_H
#define BRAID_CORE_ENGINE_H

#include "core/comm.h"

/* Runs a->coll to completion on the calling thread; seq is the collective's sequence number.
 * The caller has validated the arguments. */
braid_result_t braid_engine_run(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq);

#endif
