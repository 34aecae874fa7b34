/* What the files of the point-to-point layer share (p2p_conn.c: connections and batches;
 * p2p.c: the runner; p2p_reduce.c: its reducing receive; p2p_check.c: header checks): the
 * per-communicator state behind comm->p2p and the header of an operation's messages. Internal to
 * src/core/p2p*.c. */
#ifndef BRAID_CORE_P2P_IMPL_H
#define BRAID_CORE_P2P_IMPL_H

#include "core/p2p.h"
#include "core/p2p_cma.h"
#include "core/ntpick.h"

#include <stddef.h>
#include <stdint.h>

/* A message to self, queued by the send until the receive takes it. */
typedef struct self_msg {
    struct self_msg *next;
    uint32_t seq;
    braid_datatype_t dtype;
    size_t count;
    char data[];
} self_msg_t;

struct braid_p2p_state {
    braid_conn_t **send, **recv; /* nranks entries; NULL for this rank */
    uint32_t *send_seq, *recv_seq;
    /* Per peer: the last receive notice (BRAID_MSG_NOTICE of coll BRAID_COLL_RECV) taken from
     * it that was no mismatch yet (flags 0: none): kept for this rank's later collectives. */
    braid_msg_hdr_t *recv_notice;
    size_t chunk;
    self_msg_t *self_head, *self_tail;
    braid_p2p_cma_t *cma; /* single-copy sends within a host (p2p_cma.c) */
    braid_nt_pick_t
        *ntpick;           /* per peer: stores into its shm send slots (BRAID_P2P_NT_SLOTS auto) */
    braid_nt_pick_t *ntrx; /* per peer: this rank's copies out of its shm slots, per kind */
};

/* Copies a message's payload into a send slot of connection c (to peer); returns the
 * BRAID_MSG_NT flag when it used streaming stores, else 0. */
uint8_t braid_p2p_copy_to_slot(struct braid_p2p_state *st, braid_conn_t *c, int peer, void *slot,
                               const void *src, size_t nb);
/* Copies a received message's payload (header flags) out of connection c's slot (from peer);
 * on shm with BRAID_P2P_NT_SLOTS=auto, times it and reports the cost to the sender. */
void braid_p2p_copy_from_slot(struct braid_p2p_state *st, braid_conn_t *c, int peer, void *dst,
                              const void *slot, size_t nb, uint8_t flags);

/* Adds op's event, from its start (op->tl0) to now, to the timeline (p2p_check.c). */
void braid_p2p_timeline_op(struct braid_comm *comm, const braid_p2p_op_t *op);

/* The header a sender of op puts on its messages (bytes filled per message). */
static inline braid_msg_hdr_t braid_p2p_op_hdr(const braid_p2p_op_t *op)
{
    return (braid_msg_hdr_t){.seq = op->seq,
                             .coll = (uint8_t)op->coll,
                             .dtype = (uint8_t)op->dtype,
                             .op = (uint8_t)(op->coll == BRAID_COLL_SEND ? 0 : op->op),
                             .root = op->coll == BRAID_COLL_SEND ? -1 : op->root,
                             .count = op->count};
}

static inline size_t braid_p2p_op_bytes(const braid_p2p_op_t *op)
{
    return op->count * braid_dtype_size(op->dtype);
}

/* A received header against what op expects next (p2p_check.c); `got` is the message's
 * payload size (h->bytes, or the size a CMA descriptor names); `expect` is the exact size when
 * known (reduce, CMA), else 0 (any size up to what is left, non-empty while something is). */
braid_result_t braid_p2p_check_msg(struct braid_comm *comm, const braid_p2p_op_t *op, int from,
                                   const braid_msg_hdr_t *h, const void *buf, uint64_t got,
                                   size_t expect);

/* The kernels' op of a reducing receive (p2p_reduce.c): a PreMulSum's, and a
 * float16/bfloat16/float8 avg's, inputs were scaled (coll_p2p.c), so they sum; the messages
 * carry the call's op. */
braid_redop_t braid_p2p_kernel_op(const braid_p2p_op_t *op);

/* reduce_scatterv's receive (RECV_REDUCE, p2p_reduce.c): takes chunk k of every peer into
 * rr_buf/rr_hdr (nranks entries each, NULL = not held) and folds them in rank order with this
 * rank's (rr_own: a chunk-sized save for in place, else NULL). BRAID_SUCCESS once the whole
 * operation is reduced; BRAID_INPROGRESS while chunks are missing, *wait_peer the first peer
 * whose chunk has not come (-1: no wait this pass, since a notice was taken before it and the
 * next pass comes at once). */
braid_result_t braid_p2p_step_reduce(struct braid_comm *comm, braid_p2p_op_t *op,
                                     const void **rr_buf, const braid_msg_hdr_t **rr_hdr,
                                     char *rr_own, int *wait_peer, int *moved);

#endif
