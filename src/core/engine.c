/* The engine: runs a plan's steps over the channels' ring connections (or, for steps that name
 * a peer, the communicator's point-to-point connection with that rank).
 *
 * Each channel is a small state machine: take the next step from the plan, acquire the received
 * chunk (if the primitive receives) and a free send slot (if it sends), apply the primitive,
 * post and release. Acquisitions are non-blocking; the engine round-robins the channels and,
 * when none can move, spins briefly (BRAID_SPIN_US; short when ranks outnumber cores) and then
 * sleeps in the transport's wait() on what the first blocked channel needs. Pipelining comes
 * from the transports' FIFOs: a sender runs up to nslots chunks ahead of its receiver.
 *
 * Every wait is bounded: no progress for BRAID_TIMEOUT seconds is BRAID_ERR_TIMEOUT naming the
 * peer and the operation; an abort (flag set by braid_comm_abort, which also wakes sleepers)
 * returns BRAID_ERR_ABORTED; a dead or failed peer is BRAID_ERR_REMOTE from the transport.
 *
 * Mismatches between ranks are found by the checks of engine_check.c (its header comment
 * says how). */
#include "core/engine_run.h"
#include "core/copy.h"
#include "algos/plan.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/redop.h"
#include "core/timeline.h"
#include "core/yield.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    braid_plan_cursor_t cur;
    braid_step_t step;
    int have_step;
    const braid_msg_hdr_t *rhdr;
    const void *rbuf;
    void *sbuf;
    braid_conn_t *rconn, *sconn; /* the current step's connections */
    int rinto;   /* a direct receive of the current step's payload is under way (recv_into) */
    int rdirect; /* the current step's payload came straight into the output: nothing to release */
    int plan_done; /* the plan has no more steps (channel 0 may still take its hello) */
    int done;
    uint64_t tl0; /* BRAID_TRACE: when the current step was taken, 0 = not recorded */
} chan_state_t;

/* Zero-copy where the plan allows: in ring all-gather and chain broadcast every received chunk
 * is final data at the same offset of every rank's output, so a transport that supports it
 * (rdma, for an output the user registered) may write it there directly; the engine's copy
 * from the received chunk to the output then has nothing to do (same address). */
static size_t zc_out_bytes(const struct braid_comm *comm, const braid_op_args_t *a, int algo)
{
    if (algo != BRAID_PLAN_RING || comm->nranks < 2) return 0;
    size_t es = braid_dtype_size(a->dtype);
    if (a->coll == BRAID_COLL_ALLGATHER) return a->count * (size_t)comm->nranks * es;
    if (a->coll == BRAID_COLL_BROADCAST) return a->count * es;
    return 0;
}

/* Zero-copy: whether channel c of a ring all-gather or broadcast brings this rank data (its
 * slice is not empty; a broadcast's root receives nothing). Only then is the output exposed:
 * an unused exposure takes (rdma) a receive WR of a peer that may not poll for it. */
static int zc_receives(const struct braid_comm *comm, const braid_op_args_t *a, int c)
{
    if (!braid_plan_channel_count(a->count, comm->nchannels, c)) return 0;
    return !(a->coll == BRAID_COLL_BROADCAST && comm->rank == a->root);
}

/* Bytes per piece when one input feeds two outputs (a multiple of every element size). */
#define SUB_BLOCK 8192

static void copy_bytes(void *dst, const void *src, size_t n)
{
    if (dst != src && n) braid_copy(dst, src, n);
}

/* Applies the step's primitive; all buffers are acquired. */
static void apply(run_t *r, chan_state_t *cs)
{
    const braid_step_t *s = &cs->step;
    size_t bytes = s->count * r->es;
    const char *in = (s->flags & BRAID_STEP_IN_OUT ? r->out : r->in) + s->in_off * r->es;
    char *out = r->out + s->out_off * r->es;
    const void *R = cs->rbuf;
    /* Operands of a reduction: R op in, or in op R for SWAP. */
    const void *x = R, *y = in;
    if (s->flags & BRAID_STEP_SWAP) {
        x = in;
        y = R;
    }
    void *S = cs->sbuf;
    braid_datatype_t dt = r->a->dtype;
    braid_redop_t op = r->a->op;
    int n = r->comm->nranks;
    switch ((braid_prim_t)s->prim) {
    case BRAID_PRIM_SEND:
        copy_bytes(S, in, bytes);
        break;
    case BRAID_PRIM_RECV:
        copy_bytes(out, R, bytes);
        break;
    case BRAID_PRIM_COPY:
        if (r->a->coll == BRAID_COLL_ALLREDUCE || r->a->coll == BRAID_COLL_REDUCE ||
            r->a->coll == BRAID_COLL_REDUCE_SCATTER)
            braid_reduce_finalize(dt, op, out, in, s->count, n);
        else
            copy_bytes(out, in, bytes);
        break;
    case BRAID_PRIM_COPY_SEND:
        copy_bytes(out, in, bytes);
        copy_bytes(S, in, bytes);
        break;
    case BRAID_PRIM_RECV_REDUCE_SEND:
        braid_reduce_pair(dt, op, S, x, y, s->count);
        break;
    case BRAID_PRIM_RECV_REDUCE_COPY:
        if (s->flags & BRAID_STEP_NOFINAL)
            braid_reduce_pair(dt, op, out, x, y, s->count);
        else
            braid_reduce_pair_final(dt, op, out, x, y, s->count, n);
        break;
    case BRAID_PRIM_RECV_REDUCE_COPY_SEND:
        /* Two outputs: reduce a sub-block into out, then copy it to the slot while it is
         * still in L1, so the second output costs no memory read. */
        for (size_t o = 0; o < bytes; o += SUB_BLOCK) {
            size_t b = bytes - o < SUB_BLOCK ? bytes - o : SUB_BLOCK;
            braid_reduce_pair_final(dt, op, out + o, (const char *)x + o, (const char *)y + o,
                                    b / r->es, n);
            copy_bytes((char *)S + o, out + o, b);
        }
        break;
    case BRAID_PRIM_RECV_COPY_SEND:
        for (size_t o = 0; o < bytes; o += SUB_BLOCK) {
            size_t b = bytes - o < SUB_BLOCK ? bytes - o : SUB_BLOCK;
            copy_bytes(out + o, (const char *)R + o, b);
            copy_bytes((char *)S + o, out + o, b);
        }
        break;
    default:
        break;
    }
}

/* For a send connection with send_post_ref, in a ring plan: applies a primitive whose sent
 * payload is also in in/out without the copy into the send slot and returns where that
 * payload is; NULL (nothing applied) for the others.
 *
 * Why a frame may refer to the caller's memory: ring plans write each output range once per
 * call, before sending it (copySend, recvCopySend, recvReduceCopySend), and never write it
 * again in that call. The one range written after it was sent is the input of the first send
 * when the input and output buffers overlap: in-place all-reduce rewrites it only with data
 * that went round the ring after this frame (so the frame left), but reduce-scatter with
 * sendbuf == recvbuf writes this rank's block, which needs only the chain that starts at the
 * next rank, not that rank having read the frame. So a send reads `in` by reference only when
 * the input range and the output buffer do not overlap. run_plan detaches what is left before
 * it returns. */
static const void *apply_ref(run_t *r, chan_state_t *cs)
{
    const braid_step_t *s = &cs->step;
    const braid_transport_t *ops = cs->sconn->ops;
    if (!r->by_ref || !ops->send_post_ref || !ops->send_detach) return NULL;
    size_t bytes = s->count * r->es;
    const char *in = (s->flags & BRAID_STEP_IN_OUT ? r->out : r->in) + s->in_off * r->es;
    char *out = r->out + s->out_off * r->es;
    switch ((braid_prim_t)s->prim) {
    case BRAID_PRIM_SEND:
        if (s->flags & BRAID_STEP_IN_OUT) return NULL;
        if (r->out && in < r->out + r->out_bytes && r->out < in + bytes) return NULL;
        return in;
    case BRAID_PRIM_COPY_SEND:
        copy_bytes(out, in, bytes);
        return out;
    case BRAID_PRIM_RECV_COPY_SEND:
        copy_bytes(out, cs->rbuf, bytes);
        return out;
    case BRAID_PRIM_RECV_REDUCE_COPY_SEND: {
        const void *x = cs->rbuf, *y = in;
        if (s->flags & BRAID_STEP_SWAP) {
            x = in;
            y = cs->rbuf;
        }
        braid_reduce_pair_final(r->a->dtype, r->a->op, out, x, y, s->count, r->comm->nranks);
        return out;
    }
    default:
        return NULL;
    }
}

/* Direct receives in ring plans (transports with recv_peek/recv_into: tcp): a recv or
 * recvCopySend step takes its payload straight into its place in the output, not a slot, which
 * saves a copy per chunk (all-gather, broadcast, an all-reduce's second half). Ring plans write
 * an output range once; run_plan ends direct mode before it returns. */
static int direct_step(const run_t *r, const chan_state_t *cs, size_t bytes)
{
    const braid_transport_t *t = cs->rconn->ops;
    braid_prim_t p = (braid_prim_t)cs->step.prim;
    return r->by_ref && r->out && bytes && t->recv_peek && t->recv_into && t->recv_undirect &&
           (p == BRAID_PRIM_RECV || p == BRAID_PRIM_RECV_COPY_SEND);
}

/* BRAID_SUCCESS with cs->rbuf set once the payload is in the output, with cs->rbuf NULL for a
 * message recv_get must read (empty or flagged); BRAID_INPROGRESS while waiting. */
static braid_result_t recv_direct(run_t *r, chan_state_t *cs, size_t bytes)
{
    braid_conn_t *c = cs->rconn;
    char *dst = r->out + cs->step.out_off * r->es;
    if (!cs->rinto) {
        const braid_msg_hdr_t *h;
        braid_result_t res = c->ops->recv_peek(c, &h);
        if (res != BRAID_SUCCESS) return res;
        if (h->flags || !h->bytes) return BRAID_SUCCESS;
        BRAID_CHECK(braid_run_check_header(r, c, h, NULL, bytes, 0));
        cs->rinto = 1;
    }
    braid_result_t res = c->ops->recv_into(c, dst);
    if (res != BRAID_SUCCESS) return res;
    cs->rinto = 0;
    cs->rdirect = 1;
    cs->rbuf = dst;
    return BRAID_SUCCESS;
}

/* The connection a step uses: the ring's, or the point-to-point one with peer. */
static braid_result_t step_conn(run_t *r, int ch, int peer, int send, braid_conn_t **conn_p)
{
    struct braid_comm *comm = r->comm;
    braid_conn_t *c;
    if (peer == BRAID_PEER_RING)
        c = send ? comm->ring[ch].send : comm->ring[ch].recv;
    else if (peer >= 0 && peer < comm->nranks && comm->p2p_send)
        c = send ? comm->p2p_send[peer] : comm->p2p_recv[peer];
    else
        c = NULL;
    if (!c)
        return braid_set_error(BRAID_ERR_INTERNAL, "%s: rank %d has no connection to %s rank %d",
                               braid_coll_name(r->a->coll), comm->rank,
                               send ? "send to" : "receive from", peer);
    *conn_p = c;
    return BRAID_SUCCESS;
}

static void timeline_step(run_t *r, int ch, const chan_state_t *cs, size_t bytes)
{
    braid_tl_event_t ev = {.name = braid_prim_name((braid_prim_t)cs->step.prim),
                           .kind = BRAID_TL_STEP,
                           .t0 = cs->tl0,
                           .t1 = braid_now_ns(),
                           .seq = r->hdr.seq,
                           .bytes = bytes,
                           .dtype = -1,
                           .op = -1,
                           .algo = -1,
                           .root = -1,
                           .channel = (int16_t)ch,
                           .send_peer = cs->sconn ? cs->sconn->peer : -1,
                           .recv_peer = cs->rconn ? cs->rconn->peer : -1};
    braid_timeline_add(r->comm, &ev);
}

/* res, and when it is BRAID_INPROGRESS, what the step waits for (*wait_conn_p, *wait_dir_p). */
static braid_result_t waits_on(braid_result_t res, braid_conn_t *c, braid_wait_dir_t dir,
                               braid_conn_t **wait_conn_p, braid_wait_dir_t *wait_dir_p)
{
    if (res == BRAID_INPROGRESS) {
        *wait_conn_p = c;
        *wait_dir_p = dir;
    }
    return res;
}

/* A step's chunk (from this rank's settings) must fit its connections' slots (the receiver's):
 * refused, never written or read past a slot. */
static braid_result_t check_fits(const run_t *r, const chan_state_t *cs)
{
    size_t bytes = cs->step.count * r->es;
    const braid_conn_t *c = cs->sconn && bytes > cs->sconn->slot_size   ? cs->sconn
                            : cs->rconn && bytes > cs->rconn->slot_size ? cs->rconn
                                                                        : NULL;
    if (!c) return BRAID_SUCCESS;
    return braid_set_error(BRAID_ERR_INTERNAL,
                           "%s #%u: a %zu-byte chunk does not fit the %zu-byte slots of the "
                           "connection %s rank %d (%s)",
                           braid_coll_name(r->a->coll), r->hdr.seq, bytes, c->slot_size,
                           c->is_send ? "to" : "from", c->peer, c->ops->name);
}

/* Tries to advance one channel by one step. BRAID_INPROGRESS when blocked; *wait_conn_p and
 * *wait_dir_p then say what it waits for. */
static braid_result_t try_step(run_t *r, int ch, chan_state_t *cs, braid_conn_t **wait_conn_p,
                               braid_wait_dir_t *wait_dir_p)
{
    if (ch == 0 && r->hello_send) {
        braid_result_t res = waits_on(braid_run_give_hello(r), r->comm->ring[0].send,
                                      BRAID_WAIT_SEND, wait_conn_p, wait_dir_p);
        if (res != BRAID_SUCCESS) return res;
    }
    if (!cs->have_step) {
        if (!cs->plan_done && !braid_plan_next(&cs->cur, &cs->step)) cs->plan_done = 1;
        if (cs->plan_done) {
            if (ch == 0 && r->hello_recv) {
                braid_result_t res = waits_on(braid_run_take_hello(r), r->comm->ring[0].recv,
                                              BRAID_WAIT_RECV, wait_conn_p, wait_dir_p);
                if (res != BRAID_SUCCESS) return res;
            }
            cs->done = 1;
            return BRAID_SUCCESS;
        }
        cs->have_step = 1;
        cs->tl0 = braid_timeline_enabled() ? braid_now_ns() : 0;
        cs->rbuf = NULL;
        cs->sbuf = NULL;
        cs->rconn = cs->sconn = NULL;
        braid_prim_t p = (braid_prim_t)cs->step.prim;
        if (braid_prim_recvs(p)) BRAID_CHECK(step_conn(r, ch, cs->step.recv_peer, 0, &cs->rconn));
        if (braid_prim_sends(p)) BRAID_CHECK(step_conn(r, ch, cs->step.send_peer, 1, &cs->sconn));
        BRAID_CHECK(check_fits(r, cs));
    }
    braid_prim_t p = (braid_prim_t)cs->step.prim;
    size_t bytes = cs->step.count * r->es;
    if (braid_prim_recvs(p) && !cs->rbuf) {
        braid_conn_t *c = cs->rconn;
        if (r->hello_recv && c == r->comm->ring[0].recv) { /* the hello comes first */
            braid_result_t res =
                waits_on(braid_run_take_hello(r), c, BRAID_WAIT_RECV, wait_conn_p, wait_dir_p);
            if (res != BRAID_SUCCESS) return res;
        }
        if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
        if (direct_step(r, cs, bytes)) {
            braid_result_t res =
                waits_on(recv_direct(r, cs, bytes), c, BRAID_WAIT_RECV, wait_conn_p, wait_dir_p);
            if (res != BRAID_SUCCESS) return res;
        }
    }
    if (braid_prim_recvs(p) && !cs->rbuf) {
        braid_conn_t *c = cs->rconn;
        braid_result_t res = waits_on(c->ops->recv_get(c, &cs->rhdr, &cs->rbuf), c, BRAID_WAIT_RECV,
                                      wait_conn_p, wait_dir_p);
        if (res != BRAID_SUCCESS) return res;
        BRAID_CHECK(braid_run_check_header(r, c, cs->rhdr, cs->rbuf, bytes, 0));
        /* A chunk written straight into the output must be where this step puts it. */
        const char *rb = cs->rbuf;
        if (r->zc_bytes && bytes && rb >= r->out && rb < r->out + r->zc_bytes &&
            rb != r->out + cs->step.out_off * r->es)
            return braid_set_error(BRAID_ERR_INTERNAL,
                                   "%s #%u: rank %d wrote a chunk at output offset %zu, expected "
                                   "%zu",
                                   braid_coll_name(r->a->coll), r->hdr.seq, c->peer,
                                   (size_t)(rb - r->out), cs->step.out_off * r->es);
    }
    if (braid_prim_sends(p) && !cs->sbuf) {
        braid_conn_t *c = cs->sconn;
        if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
        braid_result_t res =
            waits_on(c->ops->send_get(c, &cs->sbuf), c, BRAID_WAIT_SEND, wait_conn_p, wait_dir_p);
        if (res != BRAID_SUCCESS) return res;
    }
    const void *src = braid_prim_sends(p) && bytes ? apply_ref(r, cs) : NULL;
    if (!src) apply(r, cs);
    if (braid_prim_sends(p)) {
        braid_msg_hdr_t h = r->hdr;
        h.bytes = (uint32_t)bytes;
        const braid_transport_t *t = cs->sconn->ops;
        if (src)
            BRAID_CHECK(t->send_post_ref(cs->sconn, &h, src));
        else if (r->zc_bytes && t->send_post_at &&
                 (p == BRAID_PRIM_COPY_SEND || p == BRAID_PRIM_RECV_COPY_SEND))
            BRAID_CHECK(t->send_post_at(cs->sconn, &h, cs->step.out_off * r->es));
        else
            BRAID_CHECK(t->send_post(cs->sconn, &h));
    }
    if (braid_prim_recvs(p) && !cs->rdirect) BRAID_CHECK(cs->rconn->ops->recv_release(cs->rconn));
    cs->rdirect = 0;
    cs->have_step = 0;
    if (cs->tl0) timeline_step(r, ch, cs, bytes);
    return BRAID_SUCCESS;
}

braid_result_t braid_engine_run(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq)
{
    return braid_engine_run_plan(comm, a, seq, BRAID_PLAN_RING);
}

static braid_result_t run_steps(run_t *rp, uint32_t seq, int algo);

braid_result_t braid_engine_reject(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq,
                                   const char *reason)
{
    if (comm->nranks < 2) return BRAID_SUCCESS;
    run_t r = {.comm = comm, .a = a, .es = 1, .rejected = 1, .reason = reason};
    return run_steps(&r, seq, BRAID_PLAN_RING);
}

braid_result_t braid_engine_hello(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq)
{
    if (comm->nranks < 2) return BRAID_SUCCESS;
    run_t r = {.comm = comm, .a = a, .es = braid_dtype_size(a->dtype), .hello_only = 1};
    return run_steps(&r, seq, BRAID_PLAN_RING);
}

static braid_result_t run_plan(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq,
                               int algo, char *out);

braid_result_t braid_engine_run_plan(struct braid_comm *comm, const braid_op_args_t *a,
                                     uint32_t seq, int algo)
{
    /* A tree reduce accumulates each subtree's data in the output buffer, which only the root
     * has: the other ranks use scratch memory. */
    if (algo == BRAID_PLAN_TREE && a->coll == BRAID_COLL_REDUCE && comm->rank != a->root &&
        comm->nranks > 1 && a->count > 0) {
        char *scratch = malloc(a->count * braid_dtype_size(a->dtype));
        if (!scratch)
            return braid_set_error(BRAID_ERR_NOMEM, "reduce #%u: out of memory for %zu elements",
                                   seq, a->count);
        braid_result_t res = run_plan(comm, a, seq, algo, scratch);
        free(scratch);
        return res;
    }
    return run_plan(comm, a, seq, algo, a->recvbuf);
}

static braid_result_t run_plan(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq,
                               int algo, char *out)
{
    run_t r = {.comm = comm, .a = a, .es = braid_dtype_size(a->dtype)};
    r.in = a->sendbuf;
    r.out = out;
    r.by_ref = algo == BRAID_PLAN_RING;
    r.out_bytes = a->count * r.es * (a->coll == BRAID_COLL_ALLGATHER ? (size_t)comm->nranks : 1);
    r.zc_bytes = zc_out_bytes(comm, a, algo);
    int exposed[BRAID_MAX_CHANNELS] = {0};
    for (int c = 0; r.zc_bytes && c < comm->nchannels; c++) {
        braid_conn_t *rc = comm->ring[c].recv;
        if (!rc || !rc->ops->recv_expose || !zc_receives(comm, a, c)) continue;
        rc->ops->recv_expose(rc, seq, out, r.zc_bytes);
        exposed[c] = 1;
    }
    braid_result_t res = run_steps(&r, seq, algo);
    char why[1024] = "";
    if (res < 0) snprintf(why, sizeof(why), "rank %d: %s", comm->rank, braid_last_error());
    for (int c = 0; c < comm->nchannels; c++) {
        braid_conn_t *rc = comm->ring[c].recv;
        /* A failed call's peer may still write: the transport closes the output to it. */
        if (exposed[c] && res < 0 && rc->ops->recv_revoke) rc->ops->recv_revoke(rc, res, why);
        if (exposed[c]) rc->ops->recv_expose(rc, seq, NULL, 0);
    }
    /* Whatever the outcome, no frame may refer to the caller's buffers once we return, and no
     * direct receive may still write the output. */
    for (int c = 0; r.by_ref && c < comm->nchannels; c++) {
        braid_conn_t *sc = comm->ring[c].send, *rc = comm->ring[c].recv;
        if (sc && sc->ops->send_detach) sc->ops->send_detach(sc);
        if (rc && rc->ops->recv_undirect) rc->ops->recv_undirect(rc);
    }
    return res;
}

static braid_result_t run_steps(run_t *rp, uint32_t seq, int algo)
{
    run_t r = *rp;
    struct braid_comm *comm = r.comm;
    const braid_op_args_t *a = r.a;
    r.hdr = braid_engine_desc(a, seq);
    r.hello_send = r.hello_recv = r.rejected || r.hello_only || braid_engine_needs_hello(comm, a);
    /* No plan for calls without data (count 0, or rejected: then the arguments may be
     * anything): only the descriptor exchange runs. */
    int no_plan = r.rejected || r.hello_only || a->count == 0;
    int nch = comm->nchannels;
    size_t chunk_bytes = comm->chunk_bytes;
    if (algo != BRAID_PLAN_RING && comm->nranks > 1) {
        nch = 1; /* latency plans: one channel over the point-to-point connections */
        chunk_bytes = comm->p2p_chunk_bytes;
    }
    braid_plan_params_t pp = {.coll = a->coll,
                              .algo = algo,
                              .nranks = comm->nranks,
                              .rank = algo ? comm->rank : comm->ring_pos,
                              .root = a->root,
                              .count = a->count,
                              .nchannels = nch,
                              .order = algo ? NULL : comm->ring_order};
    pp.chunk = r.es ? chunk_bytes / r.es : 1;
    chan_state_t cs[BRAID_MAX_CHANNELS];
    int remaining = 0;
    if (no_plan) nch = 1;
    for (int c = 0; c < nch; c++) {
        memset(&cs[c], 0, sizeof(cs[c]));
        if (no_plan)
            cs[c].plan_done = cs[c].cur.done = 1;
        else
            braid_plan_begin(&cs[c].cur, &pp, c);
        cs[c].done = cs[c].cur.done && !(c == 0 && r.hello_send);
        remaining += !cs[c].done;
    }
    uint64_t spin_ns = (uint64_t)comm->spin_us * 1000ull;
    uint64_t yield_ns = (uint64_t)comm->yield_us * 1000ull;
    uint64_t timeout_ns = braid_timeout_ns(comm->timeout_s);
    uint64_t idle_since = 0, next_check = 0, check_gap = 0;
    while (remaining) {
        int progressed = 0;
        braid_conn_t *wconn = NULL;
        braid_wait_dir_t wdir = BRAID_WAIT_RECV;
        for (int c = 0; c < nch; c++) {
            if (cs[c].done) continue;
            /* Run a channel as far as it goes before moving on. */
            for (;;) {
                braid_conn_t *wc = NULL;
                braid_wait_dir_t wd = BRAID_WAIT_RECV;
                braid_result_t res = try_step(&r, c, &cs[c], &wc, &wd);
                if (res == BRAID_INPROGRESS) {
                    if (!wconn) {
                        wconn = wc;
                        wdir = wd;
                    }
                    break;
                }
                if (res < 0) return braid_run_better_cause(&r, algo, res);
                progressed = 1;
                if (cs[c].done) {
                    remaining--;
                    break;
                }
            }
        }
        if (!remaining) break;
        if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
            return braid_set_error(BRAID_ERR_ABORTED, "%s #%u aborted: %s",
                                   braid_coll_name(a->coll), seq, braid_comm_abort_reason(comm));
        if (progressed) {
            idle_since = 0;
            next_check = check_gap = 0;
            continue;
        }
        uint64_t now = braid_now_ns();
        if (!idle_since) idle_since = now;
        if (now - idle_since < spin_ns) {
            braid_cpu_relax(); /* one: 16 in a row looked away for 0.4 us (see yield.h) */
            continue;
        }
        /* Then yield: a peer that needs this core (more ranks than cores) runs at once, and
         * the ring moves at context-switch speed instead of futex wake-up speed. */
        if (now - idle_since < spin_ns + yield_ns && braid_wait_yield(comm->yield_slow_ns, now))
            continue;
        if (now - idle_since > timeout_ns)
            return braid_set_error(
                BRAID_ERR_TIMEOUT,
                "%s #%u timed out after %.1f s waiting to %s rank %d (channel %d); rank %d "
                "may be hung or late",
                braid_coll_name(a->coll), seq, comm->timeout_s,
                wdir == BRAID_WAIT_RECV ? "receive from" : "send to", wconn->peer, wconn->channel,
                wconn->peer);
        /* Sleeping: look for a mismatched peer now and then (1 ms, doubling to 64 ms). */
        if (now >= next_check) {
            if (wdir == BRAID_WAIT_RECV && r.noticed != wconn->peer + 1) {
                braid_p2p_coll_notice(comm, wconn->peer, &r.hdr); /* see core/p2p.h */
                r.noticed = wconn->peer + 1;
            }
            BRAID_CHECK(braid_run_check_foreign(&r, algo));
            BRAID_CHECK(braid_comm_watch(comm, now - idle_since)); /* hier: the parent's call */
            if (now - idle_since >= BRAID_PEER_FAILURE_GRACE_NS)
                BRAID_CHECK(braid_comm_peer_failure(comm));
            check_gap = check_gap ? check_gap * 2 : 1000000ull;
            if (check_gap > 64000000ull) check_gap = 64000000ull;
            next_check = now + check_gap;
        }
        uint64_t deadline = idle_since + timeout_ns;
        if (deadline > next_check) deadline = next_check;
        if (nch > 1 && deadline > now + 1000000ull) deadline = now + 1000000ull;
        braid_result_t wres = wconn->ops->wait(wconn, wdir, deadline);
        if (wres < 0) return braid_run_better_cause(&r, algo, wres);
    }
    return BRAID_SUCCESS;
}
