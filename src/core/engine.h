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

/* The header that describes call a (number seq) on every message it sends; recorded in
 * comm->hist by braid_engine_record so later calls can name it. The call of a fused group run
 * (a->fused > 0, core/group_fuse.c) carries its layout in the count's top half: the count
 * field is then BRAID_DESC_FUSED | a->fused << 32 | a->count. No accepted call sets bit 63 (the
 * argument checks refuse counts from 2^56; a rejected call's descriptor may carry any count,
 * which braid_engine_describe prints as it is unless it reads as a layout) and a fused count is
 * below 2^32 (its bytes are bounded by BRAID_GROUP_FUSE_BYTES, at most 64 MiB), so every executor
 * and transport that carries and compares the count (ring engine, direct path, tcp frames) checks
 * the layout, and the root field stays the root. */
#define BRAID_DESC_FUSED (1ull << 63)
braid_msg_hdr_t braid_engine_desc(const braid_op_args_t *a, uint32_t seq);
void braid_engine_record(struct braid_comm *comm, const braid_msg_hdr_t *desc);
/* Whether call a exchanges its descriptor with the ring neighbours (engine.c, "descriptor
 * exchange"): rooted collectives and count-0 calls, which otherwise leave some rank that
 * receives nothing, so nothing to check. */
/* "allreduce #12 (count 4, float32, sum)": the call a header describes, for messages. */
void braid_engine_describe(char *buf, size_t len, const braid_msg_hdr_t *h);
/* For an executor that is not the engine (algos/direct.c), while it waits in call a (number
 * seq): BRAID_ERR_MISMATCH when some peer's message on the ring or point-to-point connections
 * shows that it runs another call, or this call with another algorithm. */
braid_result_t braid_engine_check_foreign(struct braid_comm *comm, const braid_op_args_t *a,
                                          uint32_t seq);
int braid_engine_needs_hello(const struct braid_comm *comm, const braid_op_args_t *a);
/* For a call whose stages run on sub-communicators (algos/hier.c), while a stage sleeps: as
 * braid_engine_check_foreign on the parent comm, where the call runs no plan of its own but
 * part (may be NULL: none), which it may run on the ring with the same number. */
braid_result_t braid_engine_check_parent(struct braid_comm *comm, const braid_op_args_t *a,
                                         const braid_op_args_t *part, uint32_t seq);
/* The descriptor exchange of call a (number seq) alone, as rooted calls do it before their
 * data: a header-only message to the ring's next rank, one taken from the previous rank.
 * BRAID_ERR_MISMATCH (naming both calls) when a neighbour is in another call. */
braid_result_t braid_engine_hello(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq);
/* A call that this rank rejected (argument validation; reason = the message) still takes its
 * sequence number: tells the ring's next rank (REJECTED, with the reason) and waits for the
 * previous rank's message of that number. BRAID_SUCCESS when the previous rank rejected its
 * call too (then nothing ran anywhere and the communicator stays usable); else
 * BRAID_ERR_MISMATCH naming both calls (the caller fails the communicator). */
braid_result_t braid_engine_reject(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq,
                                   const char *reason);

#endif
