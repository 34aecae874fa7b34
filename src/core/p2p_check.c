/* The point-to-point layer's descriptions of messages and operations, and its mismatch
 * checks against other calls (split from p2p.c): a p2p collective's messages seen by the
 * collective engine, a collective's messages seen by a blocked p2p operation, and the notices
 * of blocked receives (see p2p.h). */
#include "core/engine.h"
#include "core/log.h"
#include "core/p2p_impl.h"
#include "transport/shm_direct.h"
#include "core/redop.h"
#include "core/timeline.h"

#include <stdio.h>
#include <string.h>

/* ---- descriptions ---------------------------------------------------------------------- */
/* An operation's event in the timeline (BRAID_TRACE), from its start to now. */
void braid_p2p_timeline_op(struct braid_comm *comm, const braid_p2p_op_t *op)
{
    static const char *names[] = {"send", "recv", "copy", "recv_reduce"};
    int sends = op->kind == BRAID_P2P_SEND,
        recvs = op->kind != BRAID_P2P_SEND && op->kind != BRAID_P2P_COPY;
    braid_tl_event_t ev = {.name = op->kind < 4 ? names[op->kind] : "p2p",
                           .kind = BRAID_TL_P2P,
                           .t0 = op->tl0,
                           .t1 = braid_now_ns(),
                           .seq = op->seq,
                           .bytes = op->count * braid_dtype_size(op->dtype),
                           .dtype = -1,
                           .op = -1,
                           .algo = -1,
                           .root = -1,
                           .send_peer = sends ? op->peer : -1,
                           .recv_peer = recvs ? op->peer : -1};
    braid_timeline_add(comm, &ev);
}

void braid_p2p_hdr_str(const braid_msg_hdr_t *h, int to, char *buf, size_t len)
{
    if (h->coll == BRAID_COLL_SEND)
        snprintf(buf, len, "send #%u to rank %d (count %llu, %s)", h->seq, to,
                 (unsigned long long)h->count, braid_dtype_name(h->dtype));
    else if (h->coll == BRAID_COLL_GROUP)
        snprintf(buf, len, "sends and receives of a group (#%u)", h->seq);
    else if (h->coll >= BRAID_COLL_ALLTOALL)
        snprintf(buf, len, "%s #%u (count %llu to rank %d, %s, %s, root %d)",
                 braid_coll_name(h->coll), h->seq, (unsigned long long)h->count, to,
                 braid_dtype_name(h->dtype), braid_redop_wire_name(h->op), h->root);
    else /* a ring collective's descriptor, a fused run's layout decoded */
        braid_engine_describe(buf, len, h);
}

void braid_p2p_op_str(const braid_p2p_op_t *op, char *buf, size_t len)
{
    char where[40] = "";
    if (op->call) snprintf(where, sizeof(where), "group call %d: ", op->call);
    const char *dir = op->kind == BRAID_P2P_SEND ? "to" : "from";
    if (op->coll == BRAID_COLL_SEND)
        snprintf(buf, len, "%s%s #%u %s rank %d (count %zu, %s)", where,
                 op->kind == BRAID_P2P_SEND ? "send" : "recv", op->seq, dir, op->peer, op->count,
                 braid_dtype_name(op->dtype));
    else if (op->kind == BRAID_P2P_RECV_REDUCE)
        snprintf(buf, len, "%s%s #%u (count %zu from every rank, %s, %s)", where,
                 braid_coll_name(op->coll), op->seq, op->count, braid_dtype_name(op->dtype),
                 braid_redop_wire_name(op->op));
    else
        snprintf(buf, len, "%s%s #%u (count %zu %s rank %d, %s, %s, root %d)", where,
                 braid_coll_name(op->coll), op->seq, op->count, dir, op->peer,
                 braid_dtype_name(op->dtype), braid_redop_wire_name(op->op), op->root);
}

void braid_p2p_reason(const braid_msg_hdr_t *h, const void *buf, size_t slot_size, char *out,
                      size_t len)
{
    size_t n = h->bytes;
    if (n > slot_size) n = slot_size;
    if (n > len - 1) n = len - 1;
    memcpy(out, buf, n);
    out[n] = '\0';
}

/* ---- checks against other calls ------------------------------------------------------- */
void braid_p2p_coll_notice(struct braid_comm *comm, int peer, const braid_msg_hdr_t *mine)
{
    braid_conn_t *c = braid_p2p_conn(comm, peer, 1);
    void *slot;
    if (!c || c->ops->send_get(c, &slot) != BRAID_SUCCESS) return; /* best effort */
    braid_msg_hdr_t h = *mine;
    h.bytes = 0;
    h.flags = BRAID_MSG_NOTICE;
    (void)c->ops->send_post(c, &h);
}

braid_result_t braid_p2p_peek_coll_notice(struct braid_comm *comm, int p, const char *mine)
{
    braid_conn_t *c = braid_p2p_conn(comm, p, 0);
    const braid_msg_hdr_t *h;
    const void *buf;
    if (!c || (c->ops->progress && c->ops->progress(c) < 0) ||
        c->ops->recv_get(c, &h, &buf) != BRAID_SUCCESS || !(h->flags & BRAID_MSG_NOTICE) ||
        h->coll == BRAID_COLL_RECV)
        return BRAID_SUCCESS; /* errors are left to the waits */
    return braid_p2p_take_notice(comm, p, h, 0, "called", mine);
}

/* Rank p's receive notice h (its recv #q from this rank, blocked after its collective k): a
 * mismatch if this rank runs collective seq after k (0: not in a collective) and has not sent
 * p its send #q. */
static braid_result_t recv_notice_check(struct braid_comm *comm, int p, const braid_msg_hdr_t *h,
                                        uint32_t seq, const char *verb, const char *mine)
{
    uint32_t q = h->seq, k = (uint32_t)h->root;
    if (seq && (int32_t)(braid_p2p_sent(comm, p) - q) < 0 && (int32_t)(seq - k) > 0)
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d called recv #%u from rank %d (count %llu, %s) but rank %d "
                               "%s %s (rank %d's send #%u to rank %d can only come after it)",
                               p, q, comm->rank, (unsigned long long)h->count,
                               braid_dtype_name(h->dtype), comm->rank, verb, mine, comm->rank, q,
                               p);
    return BRAID_SUCCESS;
}

braid_result_t braid_p2p_take_notice(struct braid_comm *comm, int p, const braid_msg_hdr_t *h,
                                     uint32_t seq, const char *verb, const char *mine)
{
    uint32_t q = h->seq;
    if (h->coll != BRAID_COLL_RECV && !seq && (int32_t)(q - comm->seq) > 0) {
        /* p waits for this rank in collective q, which this rank, in a send or receive with
         * p, has not reached: p's part of this operation comes after that collective. */
        char theirs[200];
        braid_p2p_hdr_str(h, comm->rank, theirs, sizeof(theirs));
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d called %s and waits for rank %d in it, but rank %d %s %s "
                               "(which rank %d can only match after that collective)",
                               p, theirs, comm->rank, comm->rank, verb, mine, p);
    }
    if (h->coll == BRAID_COLL_RECV) {
        BRAID_CHECK(recv_notice_check(comm, p, h, seq, verb, mine));
        /* Not a mismatch yet: this rank may still be in (or before) the collective p finished
         * before its receive (collective k = seq: p left it first, e.g. a ring's last step),
         * or in a send or receive. The notice comes once, so it is kept for this rank's later
         * collectives (braid_p2p_check_foreign) unless this rank sent p that message. */
        if ((int32_t)(braid_p2p_sent(comm, p) - q) < 0) comm->p2p->recv_notice[p] = *h;
    }
    braid_conn_t *c = braid_p2p_conn(comm, p, 0);
    return c->ops->recv_release(c);
}

braid_result_t braid_p2p_check_foreign(struct braid_comm *comm, const braid_msg_hdr_t *mine)
{
    for (int p = 0; comm->p2p && p < comm->nranks; p++) {
        braid_conn_t *c = braid_p2p_conn(comm, p, 0);
        const braid_msg_hdr_t *h;
        const void *buf;
        char theirs[200], me[200], why[201] = "";
        braid_p2p_hdr_str(mine, p, me, sizeof(me));
        /* A receive notice of p taken earlier (see braid_p2p_take_notice). */
        braid_msg_hdr_t *kept = &comm->p2p->recv_notice[p];
        if (kept->flags && (int32_t)(braid_p2p_sent(comm, p) - kept->seq) >= 0) kept->flags = 0;
        if (kept->flags) BRAID_CHECK(recv_notice_check(comm, p, kept, mine->seq, "called", me));
        while (c && c->ops->recv_get(c, &h, &buf) == BRAID_SUCCESS && (h->flags & BRAID_MSG_NOTICE))
            BRAID_CHECK(braid_p2p_take_notice(comm, p, h, mine->seq, "called", me));
        if (!c || c->ops->recv_get(c, &h, &buf) != BRAID_SUCCESS || h->coll == BRAID_COLL_SEND ||
            h->seq != mine->seq || (h->flags & BRAID_MSG_ABORT))
            continue;
        /* This call's own messages (a latency plan runs on these connections). */
        if (h->coll == mine->coll && h->dtype == mine->dtype && h->op == mine->op &&
            h->root == mine->root && h->count == mine->count && !(h->flags & BRAID_MSG_REJECTED))
            continue;
        braid_p2p_hdr_str(h, comm->rank, theirs, sizeof(theirs));
        if (h->flags & BRAID_MSG_REJECTED) {
            braid_p2p_reason(h, buf, c->slot_size, why, sizeof(why));
            return braid_set_error(BRAID_ERR_MISMATCH,
                                   "rank %d rejected its %s (%s) but rank %d called %s", p, theirs,
                                   why, comm->rank, me);
        }
        return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d called %s", p,
                               theirs, comm->rank, me);
    }
    return BRAID_SUCCESS;
}

/* Looks (without consuming) at the collective engine's connections (rings, latency plans)
 * for a message of collective seq: a peer that runs a ring/tree collective with that number
 * while this rank runs `mine` (verb: "called", "rejected its") is BRAID_ERR_MISMATCH. */
braid_result_t braid_p2p_coll_foreign(struct braid_comm *comm, uint32_t seq, int from,
                                      const char *verb, const char *mine)
{
    for (int i = 0; i < comm->nchannels + comm->nranks; i++) {
        braid_conn_t *c = i < comm->nchannels ? comm->ring[i].recv
                          : comm->p2p_recv    ? comm->p2p_recv[i - comm->nchannels]
                                              : NULL;
        const braid_msg_hdr_t *h;
        const void *buf;
        if (!c || (from >= 0 && c->peer != from) ||
            c->ops->recv_get(c, &h, &buf) != BRAID_SUCCESS || (h->flags & BRAID_MSG_ABORT))
            continue;
        if (from < 0 ? h->seq != seq : (int32_t)(h->seq - seq) < 0) continue;
        char theirs[200], why[201] = "";
        braid_p2p_hdr_str(h, comm->rank, theirs, sizeof(theirs));
        if (h->flags & BRAID_MSG_REJECTED) {
            braid_p2p_reason(h, buf, c->slot_size, why, sizeof(why));
            return braid_set_error(BRAID_ERR_MISMATCH,
                                   "rank %d rejected its %s (%s) but rank %d %s %s", c->peer,
                                   theirs, why, comm->rank, verb, mine);
        }
        return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d %s %s", c->peer,
                               theirs, comm->rank, verb, mine);
    }
    /* A peer in a collective on the direct shared-memory segments sends nothing here. */
    int peer;
    braid_msg_hdr_t h;
    if (braid_direct_peek_from(comm, seq, from, &peer, &h)) {
        char theirs[200];
        braid_p2p_hdr_str(&h, comm->rank, theirs, sizeof(theirs));
        return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d %s %s", peer,
                               theirs, comm->rank, verb, mine);
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_p2p_blocked_foreign(struct braid_comm *comm, const braid_p2p_op_t *op, int dir)
{
    /* A receive's evidence is only sound where what the peer posted before its collective is
     * visible here once its collective's message is: shared memory (checked again below).
     * Over sockets and verbs the peer's completed send may still be in flight on its own
     * connection when its collective's message arrives on another one; there the peer finds
     * the mismatch instead (the notice this receive sent it). */
    braid_conn_t *own = op->kind == BRAID_P2P_RECV ? braid_p2p_conn(comm, op->peer, 0) : NULL;
    if (own && strcmp(own->ops->name, "shm") != 0) return BRAID_SUCCESS;
    char mine[200];
    braid_p2p_op_str(op, mine, sizeof(mine));
    braid_result_t res = braid_p2p_coll_foreign(comm, comm->seq + 1, op->peer, "called", mine);
    /* A send: the peer's notice that its collective waits for this rank (same connection, so
     * in order with what the peer sent before it). */
    if (res >= 0 && op->kind == BRAID_P2P_SEND)
        res = braid_p2p_peek_coll_notice(comm, op->peer, mine);
    if (res != BRAID_ERR_MISMATCH) return res;
    /* The operation was blocked at the runner's last pass, but the peer may have completed its
     * part since then and gone on to its collective: no mismatch when the operation can now
     * complete (the next pass completes it). Looked at after the evidence, which the peer
     * posted after that part. A receive: its data came. A CMA send: the receiver has read it
     * all and released it (a send still posting chunks cannot be complete on the peer). */
    const braid_msg_hdr_t *h;
    const void *buf;
    if (own && own->ops->recv_get(own, &h, &buf) == BRAID_SUCCESS) return BRAID_SUCCESS;
    braid_conn_t *to = op->kind == BRAID_P2P_SEND ? braid_p2p_conn(comm, op->peer, 1) : NULL;
    if (to && dir == BRAID_WAIT_RELEASED && to->ops->send_released &&
        to->ops->send_released(to) == BRAID_SUCCESS)
        return BRAID_SUCCESS;
    return res;
}

/* While blocked. A collective of these connections: a peer in a ring/tree collective of its
 * number. Sends and receives: the peer an operation waits on has entered a later collective
 * (a message of a number above this rank's count of collectives on the engine's connections
 * from it). Calls on a communicator run in order, so that peer's matching receive or send
 * comes after its collective, which needs this rank, whose collective comes after this
 * operation: they can never meet (a mismatch, however large the message). */

/* ---- a received message against its operation -------------------------------------------- */
braid_result_t braid_p2p_check_msg(struct braid_comm *comm, const braid_p2p_op_t *op, int from,
                                   const braid_msg_hdr_t *h, const void *buf, uint64_t got,
                                   size_t expect)
{
    braid_msg_hdr_t e = braid_p2p_op_hdr(op);
    size_t left = op->count * braid_dtype_size(op->dtype) - op->off;
    if (h->flags & BRAID_MSG_REJECTED) {
        char why[201] = "", mine[200];
        braid_p2p_reason(h, buf, braid_p2p_conn(comm, from, 0)->slot_size, why, sizeof(why));
        braid_p2p_op_str(op, mine, sizeof(mine));
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d rejected its %s #%u (%s) but rank %d called %s", from,
                               braid_coll_name(h->coll), h->seq, why, comm->rank, mine);
    }
    int same = h->seq == e.seq && h->coll == e.coll && h->dtype == e.dtype && h->count == e.count &&
               h->op == e.op && h->root == e.root;
    if (same && (expect ? got == expect : (got <= left && (got > 0 || !left))))
        return BRAID_SUCCESS;
    char theirs[200], mine[200];
    braid_p2p_hdr_str(h, comm->rank, theirs, sizeof(theirs));
    braid_p2p_op_str(op, mine, sizeof(mine));
    if (same)
        return braid_set_error(
            BRAID_ERR_INTERNAL, "rank %d sent a %llu-byte message where rank %d expected %zu in %s",
            from, (unsigned long long)got, comm->rank, expect ? expect : left, mine);
    return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d called %s", from,
                           theirs, comm->rank, mine);
}
