/* The point-to-point runner: progresses a batch of operations at the same time over the
 * send/recv connections of p2p_conn.c (see p2p.h for the message format and the batch model).
 *
 * Runner. Operations are linked, in batch order, into one FIFO per (peer, direction); only the
 * head of a FIFO moves, so a pair's messages keep their order. A pass tries every head: a send
 * takes free slots and posts chunks (a multi-chunk send posts by reference from the caller's
 * buffer where the transport can, and detaches before it completes), a receive takes filled
 * slots, checks each header against what it expects and copies out. RECV_REDUCE (at most one
 * per batch: reduce_scatterv) holds chunk k of every peer at once and folds them in rank order.
 * A pass that moves nothing spins (BRAID_SPIN_US), yields (BRAID_YIELD_US), then sleeps in one
 * blocked connection's wait(), the next one at the next sleep. */
#include "core/p2p_impl.h"
#include "core/config.h"
#include "core/log.h"
#include "core/copy.h"
#include "core/timeline.h"
#include "core/yield.h"
#include "core/redop.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the runner ------------------------------------------------------------------------- */
/* Ranks whose runner arrays live on the stack (braid_p2p_run). */
#define RUN_STACK_RANKS 16

typedef struct {
    struct braid_comm *comm;
    struct braid_p2p_state *st;
    braid_p2p_batch_t *b;
    int *shead, *stail, *rhead, *rtail; /* per peer FIFOs of op indices, -1 = empty */
    int *used_ref;                      /* per peer: a send posted by reference */
    int *drain;     /* per peer: the head send is posted whole, its frames still going out */
    int *rx_direct; /* per peer: a receive may have a message going straight to its buffer */
    int ndrain;
    const void **rr_buf; /* RECV_REDUCE: chunk held from each peer */
    const braid_msg_hdr_t **rr_hdr;
    char *rr_own; /* RECV_REDUCE in place: this rank's chunk saved */
    int rr;       /* the RECV_REDUCE op, -1 = none */
    int linked, remaining;
    int copy_head, copy_tail; /* COPY ops linked, run after the pass that posts the sends */
    braid_p2p_done_fn done;
    void *arg;
    /* What the last pass waits for (a peer and direction per blocked head). */
    int *blk_op, *blk_dir, nblk;
    struct pollfd *pfd;       /* as many: wait_all's */
    int err_op;               /* the operation whose step failed, -1 = none */
    braid_result_t stage_res; /* a staged receive's copy to the device failed (p2p_dev.c) */
    char stage_msg[256];
} runner_t;

static void op_complete(runner_t *r, braid_p2p_op_t *op, braid_result_t res)
{
    if (op->done) return;
    op->done = 1;
    if (op->shadow) {
        res = braid_p2p_stage_out(r->comm, op, res);
        if (res < 0 && r->stage_res >= 0) {
            r->stage_res = res;
            snprintf(r->stage_msg, sizeof(r->stage_msg), "%s", braid_last_error());
        }
    }
    if (op->tl0 && res == BRAID_SUCCESS) braid_p2p_timeline_op(r->comm, op);
    r->remaining--;
    if (op->req && r->done) r->done(r->comm, op, res, r->arg);
}

/* A send to self is copied into the communicator's queue at once (so it never waits). */
static braid_result_t self_send(runner_t *r, braid_p2p_op_t *op)
{
    size_t bytes = braid_p2p_op_bytes(op);
    self_msg_t *m = malloc(sizeof(*m) + bytes);
    if (!m) return braid_set_error(BRAID_ERR_NOMEM, "send to self: out of memory for %zu B", bytes);
    m->next = NULL;
    m->seq = op->seq;
    m->dtype = op->dtype;
    m->count = op->count;
    if (bytes) memcpy(m->data, op->sbuf, bytes);
    if (r->st->self_tail)
        r->st->self_tail->next = m;
    else
        r->st->self_head = m;
    r->st->self_tail = m;
    op_complete(r, op, BRAID_SUCCESS);
    return BRAID_SUCCESS;
}

static braid_result_t self_recv(runner_t *r, braid_p2p_op_t *op)
{
    self_msg_t *m = r->st->self_head;
    if (!m) return BRAID_INPROGRESS;
    if (m->seq != op->seq || m->dtype != op->dtype || m->count != op->count) {
        char mine[200];
        braid_p2p_op_str(op, mine, sizeof(mine));
        return braid_set_error(
            BRAID_ERR_MISMATCH, "rank %d called send #%u to rank %d (count %zu, %s) but %s",
            op->peer, m->seq, op->peer, m->count, braid_dtype_name(m->dtype), mine);
    }
    if (m->count) memcpy(op->rbuf, m->data, braid_p2p_op_bytes(op));
    r->st->self_head = m->next;
    if (!r->st->self_head) r->st->self_tail = NULL;
    free(m);
    op_complete(r, op, BRAID_SUCCESS);
    return BRAID_SUCCESS;
}

/* Links the batch's new operations into their FIFOs; local ones complete here. */
static braid_result_t link_new(runner_t *r)
{
    int me = r->comm->rank;
    for (; r->linked < r->b->nops; r->linked++) {
        int i = r->linked;
        braid_p2p_op_t *op = &r->b->ops[i];
        op->next = -1;
        op->tl0 = braid_timeline_enabled() ? braid_now_ns() : 0;
        r->remaining++;
        if (op->on_dev && !op->shadow) BRAID_CHECK(braid_p2p_stage_in(r->comm, op));
        switch ((braid_p2p_kind_t)op->kind) {
        case BRAID_P2P_COPY: /* run_copies, once the sends of this batch are on their way */
            if (r->copy_tail >= 0)
                r->b->ops[r->copy_tail].next = i;
            else
                r->copy_head = i;
            r->copy_tail = i;
            continue;
        case BRAID_P2P_RECV_REDUCE:
            if (r->rr >= 0)
                return braid_set_error(BRAID_ERR_INTERNAL, "two reducing receives in one batch");
            r->rr = i;
            if (r->comm->nranks == 1) {
                if (op->count)
                    braid_reduce_finalize(op->dtype, braid_p2p_kernel_op(op), op->rbuf, op->sbuf,
                                          op->count, 1);
                op_complete(r, op, BRAID_SUCCESS);
            }
            continue;
        case BRAID_P2P_SEND:
            if (op->peer == me) {
                BRAID_CHECK(self_send(r, op));
                continue;
            }
            if (r->stail[op->peer] >= 0)
                r->b->ops[r->stail[op->peer]].next = i;
            else
                r->shead[op->peer] = i;
            r->stail[op->peer] = i;
            continue;
        case BRAID_P2P_RECV:
            if (r->rtail[op->peer] >= 0)
                r->b->ops[r->rtail[op->peer]].next = i;
            else
                r->rhead[op->peer] = i;
            r->rtail[op->peer] = i;
            continue;
        }
    }
    return BRAID_SUCCESS;
}

/* The local copies linked so far (an alltoall's own block, a gather root's): after a pass
 * has posted the sends, so that the peers read this rank's messages (by CMA, or from the slots
 * the pass filled) while it copies. From BRAID_P2P_LOCAL_NT_MIN bytes with streaming stores
 * where the direct path's slots take them (BRAID_DIRECT_NT_SLOTS: AMD, not oversubscribed):
 * 2-rank all-to-all took 0.79 / 1.03 / 0.86 of the time at 4 / 16 / 64 MiB with them (5-round
 * A/B; 0.82 at 16 MiB in 3 alternated runs before it); with 4 ranks on 2 cpus 0.91-1.12x, where
 * auto keeps them off (perf/RESULTS.md, session 14). */
#define BRAID_P2P_LOCAL_NT_MIN ((size_t)2 << 20)
static int run_copies(runner_t *r)
{
    if (r->copy_head < 0) return 0;
    for (int i = r->copy_head; i >= 0;) {
        braid_p2p_op_t *op = &r->b->ops[i];
        int next = op->next;
        size_t nb = braid_p2p_op_bytes(op);
        if (op->rbuf != op->sbuf && op->count)
            braid_copy_shared(op->rbuf, op->sbuf, nb,
                              r->comm->direct_nt_slots == 1 && nb >= BRAID_P2P_LOCAL_NT_MIN);
        op_complete(r, op, BRAID_SUCCESS);
        i = next;
    }
    r->copy_head = r->copy_tail = -1;
    return 1;
}

static void block_on(runner_t *r, int op, int dir)
{
    r->blk_op[r->nblk] = op;
    r->blk_dir[r->nblk] = dir;
    r->nblk++;
}

/* A send by CMA (p2p_cma.h): posts the descriptor, then completes once the receiver has
 * released it (it has read the whole buffer by then). */
static braid_result_t cma_send(runner_t *r, braid_p2p_op_t *op, braid_conn_t *c, int *moved)
{
    if (!op->cma) {
        if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
        void *slot;
        braid_result_t res = c->ops->send_get(c, &slot);
        if (res == BRAID_INPROGRESS) {
            block_on(r, r->shead[op->peer], BRAID_WAIT_SEND);
            return BRAID_SUCCESS;
        }
        BRAID_CHECK(res);
        braid_msg_hdr_t h = braid_p2p_op_hdr(op);
        if (op->timed) h.flags |= BRAID_MSG_PICKED; /* the receiver times its reads */
        BRAID_CHECK(braid_p2p_cma_post(c, slot, &h, op->sbuf, braid_p2p_op_bytes(op)));
        op->cma = 1;
        op->cma_slot = slot;
        op->nmsgs = 1;
        *moved = 1;
    }
    braid_result_t res = c->ops->send_released(c);
    if (res == BRAID_INPROGRESS) {
        /* Copy a piece into the receiver's buffer meanwhile, once it has published it. */
        int pushed = 0;
        uint64_t t0 = op->timed ? braid_now_ns() : 0;
        BRAID_CHECK(braid_p2p_cma_push(r->st->cma, c, op->cma_slot, op->sbuf, &pushed));
        if (pushed && op->timed) op->copy_ns += braid_now_ns() - t0;
        if (pushed) {
            *moved = 1;
            return BRAID_SUCCESS;
        }
        block_on(r, r->shead[op->peer], BRAID_WAIT_RELEASED);
        return BRAID_SUCCESS;
    }
    BRAID_CHECK(res);
    op->off = braid_p2p_op_bytes(op);
    if (op->timed) braid_p2p_cma_tx_done(r->st->cma, c, op->peer, 1, op->off, op->copy_ns);
    op_complete(r, op, BRAID_SUCCESS);
    *moved = 1;
    return BRAID_SUCCESS;
}

/* Single messages from this size go by reference too where the transport can (tcp): the
 * kernel copies them from the caller's buffer, and send_detach copies only what is still
 * queued when the send completes (nothing, when the socket took it at once). */
#define BRAID_P2P_REF_MIN ((size_t)4096)

/* Moves the send at the head of peer's FIFO as far as its slots allow. */
static braid_result_t step_send(runner_t *r, int peer, int *moved)
{
    braid_p2p_op_t *op = &r->b->ops[r->shead[peer]];
    braid_conn_t *c = r->st->send[peer];
    if (op->cma || (!op->nmsgs && braid_p2p_cma_use(r->st->cma, c, op, braid_p2p_op_bytes(op)))) {
        BRAID_CHECK(cma_send(r, op, c, moved));
        if (!op->done) return BRAID_SUCCESS;
        r->shead[peer] = op->next;
        if (op->next < 0) r->stail[peer] = -1;
        return BRAID_SUCCESS;
    }
    /* Messages fill the connection's slots, but for reduce_scatterv (whose reducing receive
     * takes st->chunk from every peer at once). */
    size_t bytes = braid_p2p_op_bytes(op),
           chunk = op->coll == BRAID_COLL_REDUCE_SCATTERV ? r->st->chunk : c->slot_size;
    for (;;) {
        if (op->nmsgs && op->off >= bytes) break;
        if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
        void *slot;
        braid_result_t res = c->ops->send_get(c, &slot);
        if (res == BRAID_INPROGRESS) {
            block_on(r, r->shead[peer], BRAID_WAIT_SEND);
            return BRAID_SUCCESS;
        }
        BRAID_CHECK(res);
        size_t nb = bytes - op->off < chunk ? bytes - op->off : chunk;
        braid_msg_hdr_t h = braid_p2p_op_hdr(op);
        h.bytes = (uint32_t)nb;
        const char *src = (const char *)op->sbuf + op->off;
        if ((bytes > chunk || nb >= BRAID_P2P_REF_MIN) && c->ops->send_post_ref &&
            c->ops->send_detach) {
            BRAID_CHECK(c->ops->send_post_ref(c, &h, src));
            r->used_ref[peer] = 1;
        } else {
            uint64_t t0 = op->timed ? braid_now_ns() : 0;
            if (op->timed) h.flags |= BRAID_MSG_PICKED;
            if (nb) h.flags |= braid_p2p_copy_to_slot(r->st, c, peer, slot, src, nb);
            if (op->timed) op->copy_ns += braid_now_ns() - t0;
            BRAID_CHECK(c->ops->send_post(c, &h));
        }
        op->off += nb;
        op->nmsgs++;
        *moved = 1;
        if (op->timed && op->off >= bytes)
            braid_p2p_cma_tx_done(r->st->cma, c, peer, 0, bytes, op->copy_ns);
    }
    if (r->used_ref[peer]) {
        /* The last send on the connection stays open while the batch has other work that is
         * not draining too, until the transport has taken its frames from the buffer: no
         * copy. Otherwise what is still queued is copied out (send_detach). */
        int others = r->remaining - 1 - (r->ndrain - r->drain[peer]);
        /* Only a send of several messages: one of a single message completes at once (it is
         * buffered, as sends of that size always were: copied out when still queued). */
        if (op->next < 0 && others > 0 && bytes > chunk && c->ops->send_inflight &&
            c->ops->send_inflight(c)) {
            if (!r->drain[peer]) r->ndrain++;
            r->drain[peer] = 1;
            return BRAID_SUCCESS;
        }
        if (r->drain[peer]) r->ndrain--;
        r->drain[peer] = 0;
        c->ops->send_detach(c); /* the caller may reuse the buffer once the send completed */
        r->used_ref[peer] = 0;
    }
    r->shead[peer] = op->next;
    if (op->next < 0) r->stail[peer] = -1;
    op_complete(r, op, BRAID_SUCCESS);
    *moved = 1;
    return BRAID_SUCCESS;
}

static braid_result_t step_recv(runner_t *r, int peer, int *moved)
{
    braid_p2p_op_t *op = &r->b->ops[r->rhead[peer]];
    if (peer == r->comm->rank) {
        braid_result_t res = self_recv(r, op);
        if (res == BRAID_INPROGRESS) {
            block_on(r, r->rhead[peer], BRAID_WAIT_RECV);
            return BRAID_SUCCESS;
        }
        BRAID_CHECK(res);
    } else {
        braid_conn_t *c = r->st->recv[peer];
        size_t bytes = braid_p2p_op_bytes(op);
        int direct = c->ops->recv_peek && c->ops->recv_into && c->ops->recv_undirect;
        for (;;) {
            if (op->nmsgs && op->off >= bytes) break;
            if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
            const braid_msg_hdr_t *h;
            const void *buf;
            braid_result_t res;
            if (direct) { /* the payload straight into the buffer, once its header passed */
                res = c->ops->recv_peek(c, &h);
                if (res == BRAID_INPROGRESS) {
                    block_on(r, r->rhead[peer], BRAID_WAIT_RECV);
                    return BRAID_SUCCESS;
                }
                BRAID_CHECK(res);
                if (h->bytes && !h->flags) {
                    BRAID_CHECK(braid_p2p_check_msg(r->comm, op, peer, h, NULL, h->bytes, 0));
                    uint32_t nb = h->bytes;
                    r->rx_direct[peer] = 1;
                    res = c->ops->recv_into(c, (char *)op->rbuf + op->off);
                    if (res == BRAID_INPROGRESS) {
                        block_on(r, r->rhead[peer], BRAID_WAIT_RECV);
                        return BRAID_SUCCESS;
                    }
                    BRAID_CHECK(res);
                    r->rx_direct[peer] = 0;
                    op->off += nb;
                    op->nmsgs++;
                    *moved = 1;
                    continue;
                }
            }
            res = c->ops->recv_get(c, &h, &buf);
            if (res == BRAID_INPROGRESS) {
                block_on(r, r->rhead[peer], BRAID_WAIT_RECV);
                return BRAID_SUCCESS;
            }
            BRAID_CHECK(res);
            if (h->flags & BRAID_MSG_NOTICE) {
                char mine[200];
                braid_p2p_op_str(op, mine, sizeof(mine));
                BRAID_CHECK(braid_p2p_take_notice(
                    r->comm, peer, h, op->coll == BRAID_COLL_SEND ? 0 : op->seq, "called", mine));
                *moved = 1;
                continue;
            }
            if (h->flags & BRAID_MSG_CMA) {
                /* The whole operation in one message, read in pieces (p2p_cma.h). */
                if (!op->cma && op->off)
                    return braid_set_error(BRAID_ERR_INTERNAL,
                                           "rank %d sent a CMA descriptor after %zu bytes", peer,
                                           op->off);
                if (!op->cma) {
                    uint64_t got;
                    BRAID_CHECK(braid_p2p_cma_desc(r->st->cma, peer, h, buf, &got));
                    BRAID_CHECK(braid_p2p_check_msg(r->comm, op, peer, h, buf, got, bytes));
                    op->cma = 1;
                    op->cma_slot = (void *)buf;
                    op->timed = (h->flags & BRAID_MSG_PICKED) && r->st->cma;
                }
                /* The descriptor's shared fields are written in place: CMA is shm only, whose
                 * slots both ends map read-write (transport.h). */
                BRAID_CHECK(braid_p2p_cma_pull(r->comm, c, (void *)buf, op->rbuf, bytes, &op->off,
                                               op->timed ? &op->copy_ns : NULL));
                *moved = 1;
                if (op->off < bytes) return BRAID_SUCCESS; /* the next piece at the next pass */
                op->nmsgs++;
                BRAID_CHECK(c->ops->recv_release(c));
                if (op->timed) braid_p2p_cma_rx_done(r->st->cma, c, peer, 1, bytes, op->copy_ns);
                continue;
            }
            BRAID_CHECK(braid_p2p_check_msg(r->comm, op, peer, h, buf, h->bytes, 0));
            /* a message whose path the sender picked: its copies are timed for the choice */
            if (!op->nmsgs) op->timed = (h->flags & BRAID_MSG_PICKED) && r->st->cma;
            uint64_t t0 = op->timed ? braid_now_ns() : 0;
            if (h->bytes)
                braid_p2p_copy_from_slot(r->st, c, peer, (char *)op->rbuf + op->off, buf, h->bytes,
                                         h->flags);
            if (op->timed) op->copy_ns += braid_now_ns() - t0;
            op->off += h->bytes;
            op->nmsgs++;
            BRAID_CHECK(c->ops->recv_release(c));
            *moved = 1;
            if (op->timed && op->off >= bytes)
                braid_p2p_cma_rx_done(r->st->cma, c, peer, 0, bytes, op->copy_ns);
        }
        op_complete(r, op, BRAID_SUCCESS);
    }
    r->rhead[peer] = op->next;
    if (op->next < 0) r->rtail[peer] = -1;
    *moved = 1;
    return BRAID_SUCCESS;
}

/* reduce_scatterv's receive (p2p_reduce.c); blocks on the first peer still missing. */
static braid_result_t step_reduce(runner_t *r, int *moved)
{
    braid_p2p_op_t *op = &r->b->ops[r->rr];
    int wait_peer = -1;
    braid_result_t res =
        braid_p2p_step_reduce(r->comm, op, r->rr_buf, r->rr_hdr, r->rr_own, &wait_peer, moved);
    if (res < 0) return res;
    if (res == BRAID_INPROGRESS) {
        if (wait_peer >= 0) block_on(r, r->rr, BRAID_WAIT_RECV);
        return BRAID_SUCCESS;
    }
    op_complete(r, op, BRAID_SUCCESS);
    r->rr = -1;
    return BRAID_SUCCESS;
}

/* One pass over every FIFO head. */
static braid_result_t pass(runner_t *r, int *moved)
{
    int n = r->comm->nranks;
    r->nblk = 0;
    braid_result_t res;
    for (int p = 0; p < n; p++) {
        while (r->shead[p] >= 0) {
            int before = r->shead[p];
            r->err_op = before;
            BRAID_CHECK(step_send(r, p, moved));
            if (r->shead[p] == before) break; /* blocked */
        }
        while (r->rhead[p] >= 0) {
            int before = r->rhead[p];
            r->err_op = before;
            BRAID_CHECK(step_recv(r, p, moved));
            if (r->rhead[p] == before) break;
        }
    }
    r->err_op = r->rr;
    if (r->rr >= 0 && !r->b->ops[r->rr].done) {
        res = step_reduce(r, moved);
        if (res < 0) return res;
    }
    r->err_op = -1;
    return BRAID_SUCCESS;
}

static braid_result_t check_coll_foreign(runner_t *r)
{
    char mine[200];
    braid_p2p_op_t *last = &r->b->ops[r->b->nops - 1];
    /* r->err_op: the operation an error names (failed_op), the one whose check found it. */
    if (last->coll != BRAID_COLL_SEND) {
        braid_p2p_op_str(last, mine, sizeof(mine));
        r->err_op = r->b->nops - 1;
        BRAID_CHECK(braid_p2p_coll_foreign(r->comm, last->seq, -1, "called", mine));
    }
    for (int i = 0; i < r->nblk && last->coll == BRAID_COLL_SEND; i++) {
        braid_p2p_op_t *op = &r->b->ops[r->blk_op[i]];
        if (op->coll != BRAID_COLL_SEND || op->peer == r->comm->rank) continue;
        r->err_op = r->blk_op[i];
        BRAID_CHECK(braid_p2p_blocked_foreign(r->comm, op, r->blk_dir[i]));
    }
    r->err_op = -1;
    return BRAID_SUCCESS;
}

/* A blocked receive from a peer tells that peer, once (BRAID_MSG_NOTICE, see p2p.h), so a
 * peer in a collective can see that the two can never meet. Only when nothing else of this
 * batch is in flight to the peer (a notice never sits between a send's chunks), and only
 * where a slot is free (best effort: it is only a diagnosis). */
static void give_notices(runner_t *r)
{
    for (int i = 0; i < r->nblk; i++) {
        braid_p2p_op_t *op = &r->b->ops[r->blk_op[i]];
        if (op->kind != BRAID_P2P_RECV || op->coll != BRAID_COLL_SEND || op->noticed ||
            op->peer == r->comm->rank || r->shead[op->peer] >= 0 || r->used_ref[op->peer])
            continue;
        braid_conn_t *c = r->st->send[op->peer];
        void *slot;
        if (c->ops->send_get(c, &slot) != BRAID_SUCCESS) continue;
        braid_msg_hdr_t h = {.seq = op->seq,
                             .coll = BRAID_COLL_RECV,
                             .dtype = (uint8_t)op->dtype,
                             .flags = BRAID_MSG_NOTICE,
                             .root = (int32_t)r->comm->seq,
                             .count = op->count};
        if (c->ops->send_post(c, &h) == BRAID_SUCCESS) op->noticed = 1;
    }
}

/* Sleeps until any connection the last pass blocked on may move, or deadline: one poll over
 * all of them where each offers a descriptor (tcp), so data arriving from one peer is taken
 * at once while others are still silent. 0 when one offers none (or waits on itself): the
 * caller then sleeps in one connection's wait(), turn by turn. */
static int wait_all(runner_t *r, uint64_t deadline)
{
    int k = 0;
    for (int i = 0; i < r->nblk; i++) {
        braid_p2p_op_t *op = &r->b->ops[r->blk_op[i]];
        if (op->peer == r->comm->rank) return 0;
        /* A send waits on its own connection for slots and for a CMA release alike. */
        braid_conn_t *c =
            r->blk_dir[i] != BRAID_WAIT_RECV ? r->st->send[op->peer] : r->st->recv[op->peer];
        if (!c->ops->wait_fd || !c->ops->wait_fd(c, (braid_wait_dir_t)r->blk_dir[i], &r->pfd[k]))
            return 0;
        k++;
    }
    uint64_t now = braid_now_ns();
    if (now >= deadline) return 1;
    uint64_t ns = deadline - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    ppoll(r->pfd, (nfds_t)k, &ts, NULL);
    return 1;
}

static braid_result_t run_loop(runner_t *r, braid_p2p_pull_fn pull)
{
    struct braid_comm *comm = r->comm;
    uint64_t spin_ns = (uint64_t)comm->spin_us * 1000ull;
    uint64_t yield_ns = (uint64_t)comm->yield_us * 1000ull;
    uint64_t timeout_ns = braid_timeout_ns(comm->timeout_s);
    uint64_t idle_since = 0, next_check = 0, check_gap = 0;
    unsigned turn = 0, idle_passes = 0;
    for (;;) {
        BRAID_CHECK(link_new(r));
        if (!r->remaining) {
            if (pull && pull(comm, r->b, r->arg) > 0) continue;
            return BRAID_SUCCESS;
        }
        int moved = 0;
        BRAID_CHECK(pass(r, &moved));
        moved |= run_copies(r);
        if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
            return braid_set_error(BRAID_ERR_ABORTED, "%s", braid_comm_abort_reason(comm));
        if (moved) {
            idle_since = 0;
            next_check = check_gap = 0;
            idle_passes = 0;
            continue;
        }
        /* The worker's queue (under its lock): while spinning every 16th idle pass (the passes
         * come one pause apart, and the submitting threads take that lock too), after it on
         * every pass (those are a yield or a sleep of at most 1 ms apart). */
        if (pull && (idle_passes++ & 15) == 0 && pull(comm, r->b, r->arg) > 0) continue;
        if (!r->nblk)
            return braid_set_error(BRAID_ERR_INTERNAL, "%d operations neither move nor wait",
                                   r->remaining);
        int wi = r->blk_op[turn % (unsigned)r->nblk], wdir = r->blk_dir[turn % (unsigned)r->nblk];
        braid_p2p_op_t *wop = &r->b->ops[wi];
        uint64_t now = braid_now_ns();
        if (!idle_since) idle_since = now;
        /* r->err_op = wi: the operation this wait's errors name (failed_op), as its message. */
        /* Every send to self of a batch that takes no more operations was queued when it was
         * linked: a blocked receive from self never gets its message, whatever else waits. */
        if (!pull && r->rhead[comm->rank] >= 0) {
            r->err_op = r->rhead[comm->rank];
            return braid_set_error(BRAID_ERR_INVALID_USAGE,
                                   "receive from self (rank %d) with no send to self posted "
                                   "before it",
                                   comm->rank);
        }
        if (now - idle_since < spin_ns) {
            braid_cpu_relax(); /* one: 16 in a row looked away for 0.4 us (see yield.h) */
            continue;
        }
        idle_passes = 0; /* past the spin: the queue on every pass */
        if (now - idle_since < spin_ns + yield_ns && braid_wait_yield(comm->yield_slow_ns, now))
            continue;
        if (now - idle_since > timeout_ns) {
            r->err_op = wi;
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "timed out after %.1f s waiting to %s rank %d; rank %d may be "
                                   "hung, late or in another call",
                                   comm->timeout_s,
                                   wdir == BRAID_WAIT_RECV ? "receive from" : "send to", wop->peer,
                                   wop->peer);
        }
        if (now >= next_check) {
            give_notices(r);
            BRAID_CHECK(check_coll_foreign(r));
            if (now - idle_since >= BRAID_PEER_FAILURE_GRACE_NS)
                BRAID_CHECK(braid_comm_peer_failure(comm)); /* a peer failed the communicator */
            check_gap = check_gap ? check_gap * 2 : 1000000ull;
            if (check_gap > 64000000ull) check_gap = 64000000ull;
            next_check = now + check_gap;
        }
        uint64_t deadline = idle_since + timeout_ns;
        if (deadline > next_check) deadline = next_check;
        if ((r->nblk > 1 || pull || wop->peer == comm->rank) && deadline > now + 1000000ull)
            deadline = now + 1000000ull;
        turn++;
        if (r->nblk > 1 && wait_all(r, deadline)) continue;
        if (wop->peer == comm->rank) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
            continue;
        }
        braid_conn_t *c = wdir != BRAID_WAIT_RECV ? r->st->send[wop->peer] : r->st->recv[wop->peer];
        r->err_op = wi;
        BRAID_CHECK(c->ops->wait(c, (braid_wait_dir_t)wdir, deadline));
        r->err_op = -1;
    }
}

/* The operation an error belongs to: the one whose step, check or wait failed, else the first
 * blocked one (a peer's failure), else the first not done. */
static braid_p2p_op_t *failed_op(runner_t *r)
{
    if (r->err_op >= 0) return &r->b->ops[r->err_op];
    if (r->nblk) return &r->b->ops[r->blk_op[0]];
    for (int i = 0; i < r->b->nops; i++)
        if (!r->b->ops[i].done) return &r->b->ops[i];
    return NULL;
}

/* The runner's per-peer arrays, when braid_p2p_run took them from the heap. */
static void free_arrays(int heap, int *ints, const void **ptrs, struct pollfd *pfd)
{
    if (!heap) return;
    free(ints);
    free(ptrs);
    free(pfd);
}

/* A batch that failed before it ran: as one failing while it runs (below), the peers are told
 * (their part would wait for this rank's) and every operation completes with the error. */
static braid_result_t fail_unrun(runner_t *r, braid_result_t res)
{
    char why[2048];
    snprintf(why, sizeof(why), "%s", braid_last_error());
    braid_comm_fail_call(r->comm, res);
    for (int i = 0; i < r->b->nops; i++)
        op_complete(r, &r->b->ops[i], res);
    braid_restore_error(why);
    return res;
}

braid_result_t braid_p2p_run(struct braid_comm *comm, braid_p2p_batch_t *b, braid_p2p_pull_fn pull,
                             braid_p2p_done_fn done, void *arg)
{
    int n = comm->nranks;
    runner_t r = {.comm = comm,
                  .st = comm->p2p,
                  .b = b,
                  .rr = -1,
                  .done = done,
                  .arg = arg,
                  .err_op = -1,
                  .copy_head = -1,
                  .copy_tail = -1};
    if (!r.st) return fail_unrun(&r, braid_set_error(BRAID_ERR_INTERNAL, "no send/recv state"));
    /* The per-peer arrays: on the stack up to RUN_STACK_RANKS ranks (three allocations per
     * call before, a tenth of an 8-byte send + receive's time on one rank). */
    int ints_st[11 * RUN_STACK_RANKS + 2];
    const void *ptrs_st[2 * RUN_STACK_RANKS];
    struct pollfd pfd_st[2 * RUN_STACK_RANKS + 1];
    int heap = n > RUN_STACK_RANKS;
    int *ints = heap ? malloc((size_t)(11 * n + 2) * sizeof(int)) : ints_st;
    const void **ptrs = heap ? calloc((size_t)n * 2, sizeof(void *)) : ptrs_st;
    r.pfd = heap ? malloc((size_t)(2 * n + 1) * sizeof(*r.pfd)) : pfd_st;
    if (!ints || !ptrs || !r.pfd) {
        free_arrays(heap, ints, ptrs, r.pfd);
        return fail_unrun(&r, braid_set_error(BRAID_ERR_NOMEM,
                                              "out of memory for a batch over %d "
                                              "ranks",
                                              n));
    }
    if (!heap) memset(ptrs_st, 0, (size_t)n * 2 * sizeof(void *));
    r.shead = ints;
    r.stail = ints + n;
    r.rhead = ints + 2 * n;
    r.rtail = ints + 3 * n;
    r.used_ref = ints + 4 * n;
    r.blk_op = ints + 5 * n;      /* a send and a receive per peer, and the reduce */
    r.blk_dir = ints + 7 * n + 1; /* as many */
    for (int i = 0; i < 4 * n; i++)
        ints[i] = -1;
    r.drain = ints + 9 * n + 2;
    r.rx_direct = ints + 10 * n + 2;
    for (int i = 4 * n; i < 5 * n; i++)
        ints[i] = 0;
    for (int i = 9 * n + 2; i < 11 * n + 2; i++)
        ints[i] = 0;
    r.rr_buf = ptrs;
    r.rr_hdr = (const braid_msg_hdr_t **)(ptrs + n);
    for (int i = 0; i < b->nops; i++)
        if (b->ops[i].kind == BRAID_P2P_RECV_REDUCE && b->ops[i].sbuf == b->ops[i].rbuf &&
            !r.rr_own) {
            r.rr_own = malloc(r.st->chunk);
            if (!r.rr_own) {
                free_arrays(heap, ints, ptrs, r.pfd);
                return fail_unrun(&r,
                                  braid_set_error(BRAID_ERR_NOMEM,
                                                  "out of memory for a %zu B chunk", r.st->chunk));
            }
        }
    braid_result_t res = run_loop(&r, pull);
    if (res >= 0 && r.stage_res < 0) res = braid_set_error(r.stage_res, "%s", r.stage_msg);
    if (res < 0) {
        char why[2048], what[200] = "";
        snprintf(why, sizeof(why), "%s", braid_last_error());
        braid_p2p_op_t *op = failed_op(&r);
        if (op) braid_p2p_op_str(op, what, sizeof(what));
        braid_set_error(res, "%s%s%s", what, *what ? ": " : "", why);
        /* The communicator fails and the peers are told before any request completes: a
         * caller whose request returns may reuse its buffer, which a peer must no longer read
         * (a CMA send's) nor write, and finds the communicator failed already. */
        braid_comm_fail_call(comm, res);
        for (int p = 0; p < n; p++)
            if (r.used_ref[p] && r.st->send[p]) r.st->send[p]->ops->send_detach(r.st->send[p]);
        for (int p = 0; p < n; p++) /* no transport writes the buffers after the call */
            if (r.rx_direct[p] && r.st->recv[p]) r.st->recv[p]->ops->recv_undirect(r.st->recv[p]);
        for (int i = 0; i < b->nops; i++) /* no sender writes an unfinished CMA receive's buffer */
            if (!b->ops[i].done && b->ops[i].kind == BRAID_P2P_RECV && b->ops[i].cma_slot)
                braid_p2p_cma_revoke(comm, r.st->recv[b->ops[i].peer], b->ops[i].cma_slot);
        for (int p = 0; p < n; p++) /* chunks held by an unfinished reduce */
            if (r.rr_buf[p]) r.st->recv[p]->ops->recv_release(r.st->recv[p]);
        snprintf(why, sizeof(why), "%s", braid_last_error());
        for (int i = 0; i < b->nops; i++)
            if (!b->ops[i].done) {
                if (i >= r.linked) r.remaining++;
                op_complete(&r, &b->ops[i], res);
            }
        braid_restore_error(why);
    }
    free_arrays(heap, ints, ptrs, r.pfd);
    free(r.rr_own);
    return res;
}
