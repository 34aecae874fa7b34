/* User-created reduction operations (PreMulSum, as ncclRedOpCreatePreMulSum with a host
 * scalar): a per-communicator table, the lookup the collectives' argument checks use, and the
 * executor step that applies the pre-multiplication.
 *
 * A created op is an int >= BRAID_NUM_OPS: BRAID_NUM_OPS + (tag << 12 | slot), slot < 4096 an
 * index in its communicator's table and tag an 18-bit serial drawn from a process-wide counter
 * at creation. A destroyed op (its slot free or reused with another tag) and an op of another
 * communicator (whose tag differs from that slot's) are rejected exactly, until 2^18 - 1 ops
 * have been created in the process and tags repeat. */
#ifndef BRAID_CORE_REDOP_H
#define BRAID_CORE_REDOP_H

#include "core/comm.h"

/* The op value the message header carries for a PreMulSum collective (the handle itself may
 * differ between ranks; the scalar may too, as in NCCL). */
#define BRAID_OP_WIRE_PREMULSUM BRAID_NUM_OPS

/* For a created op in a->op: checks that it is live on comm and made for a->dtype (else
 * BRAID_ERR_INVALID_ARG naming `what` and the op) and copies its scalar into a (premul = 1),
 * so the call no longer depends on the op (it may be destroyed while the call is queued).
 * Built-in ops are left as they are. */
braid_result_t braid_redop_resolve(struct braid_comm *comm, braid_op_args_t *a, const char *what);

/* braid_op_args_t.premul: a user's PreMulSum op (its scalar in .scalar), or BRAID_AVG of
 * float16/bfloat16/float8 run as NCCL's ncclAvg, a PreMulSum by 1/nranks (reduce.h; set only
 * once the input is scaled: the descriptor then still says avg, the kernels sum). */
#define BRAID_PREMUL_USER 1
#define BRAID_PREMUL_AVG 2

/* Whether a (not yet scaled) is BRAID_AVG of float16, bfloat16 or float8: a PreMulSum by
 * 1/nranks, which braid_redop_premul_execute runs. Integer, float32 and float64 avg sum and
 * divide the sum (the algorithms' last step). */
int braid_redop_avg_premul(const braid_op_args_t *a);

/* dst = src pre-multiplied as a's op says (count elements): by a->scalar (a user's
 * PreMulSum), or by 1/nranks (BRAID_AVG, braid_reduce_avg_prescale). */
void braid_redop_prescale(const braid_op_args_t *a, int nranks, void *dst, const void *src,
                          size_t count);

/* Runs a resolved PreMulSum collective, or a pre-scaled avg (braid_redop_avg_premul):
 * every rank's input multiplied by its scalar or by 1/nranks (in the receive buffer when it is
 * big enough and the rank needs one, else in a temporary buffer), then the sum collective of
 * the same algorithms. */
braid_result_t braid_redop_premul_execute(struct braid_comm *comm, const braid_op_args_t *a,
                                          uint32_t seq);

/* Name of an op value as the message header carries it ("sum", ..., "premulsum"). */
const char *braid_redop_wire_name(unsigned op);

/* Frees comm's table (comm destroy). */
void braid_redop_comm_free(struct braid_comm *comm);

#endif
