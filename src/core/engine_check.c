/* The engine's mismatch checks and descriptor exchange (see engine.c for the engine).
 *
 * Mismatches (ranks that disagree on the call: collective, count, dtype, op, root): every
 * message carries its call's descriptor and sequence number, and every receive checks it
 * (braid_run_check_header). That finds a mismatch only where some rank receives from a rank that
 * disagrees, so three more mechanisms make sure one does, in every call:
 *   - descriptor exchange ("hello"): in calls where some rank would receive nothing (rooted
 *     collectives: a broadcast root, the first rank of a reduce chain; count-0 calls), every
 *     rank first sends a header-only message (BRAID_MSG_HELLO) to its ring successor on
 *     channel 0 and takes one from its predecessor (before any data on that connection, or at
 *     the end). Every rank then receives some rank's descriptor, so if any two disagree, a pair
 *     of ring neighbours does, and the receiver of that pair reports it. One empty message per
 *     call and rank: rooted and count-0 calls only (the ring's all-reduce, all-gather,
 *     reduce-scatter already send at once to the same successor). A root then returns once its
 *     predecessor entered the call, not before.
 *   - peeking while blocked (braid_run_check_foreign): a rank that sleeps looks at the next message
 * of every incoming connection, the ones its plan uses included: one of this call's number with
 * another descriptor, or one left over from an earlier call that this rank never read, is a
 * mismatch (two ranks that wait on each other for data see each other's descriptors that way, and
 * ranks that picked different algorithms too).
 *   - rejected calls (braid_engine_reject): a call refused by argument checks on one rank
 *     still takes its number and tells the successor, so the peers' call of that number fails
 *     naming it instead of pairing with the rejecting rank's next call.
 * A rank that detects a mismatch fails the communicator and tells its peers (coll.c), so
 * every rank's call that still needs a message from a failed rank ends in the error, within
 * a wake-up. A rank whose own part was already complete (all it had to receive came from
 * ranks that agreed with it) returns success from that call; the error then comes from its
 * next call on the communicator. */
#include "core/engine_run.h"
#include "algos/plan.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/redop.h"
#include "transport/shm_direct.h"

#include <stdio.h>
#include <string.h>

static int same_call(const braid_msg_hdr_t *a, const braid_msg_hdr_t *b)
{
    return a->seq == b->seq && a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && a->count == b->count;
}

braid_msg_hdr_t braid_engine_desc(const braid_op_args_t *a, uint32_t seq)
{
    /* A fused group run's layout rides in the count's top half (BRAID_DESC_FUSED, engine.h) */
    uint64_t layout = a->fused > 0 ? BRAID_DESC_FUSED | (uint64_t)a->fused << 32 : 0;
    return (braid_msg_hdr_t){.seq = seq,
                             .coll = (uint8_t)a->coll,
                             .dtype = (uint8_t)a->dtype,
                             .op = (uint8_t)(a->premul == BRAID_PREMUL_AVG ? BRAID_AVG
                                             : a->premul                   ? BRAID_OP_WIRE_PREMULSUM
                                                                           : a->op),
                             .root = a->root,
                             .count = a->count | layout};
}

void braid_engine_record(struct braid_comm *comm, const braid_msg_hdr_t *desc)
{
    comm->hist[desc->seq % BRAID_HIST] = *desc;
}

int braid_engine_needs_hello(const struct braid_comm *comm, const braid_op_args_t *a)
{
    if (comm->nranks < 2) return 0;
    switch (a->coll) {
    case BRAID_COLL_BROADCAST:
    case BRAID_COLL_REDUCE:
        return 1;
    case BRAID_COLL_ALLREDUCE:
    case BRAID_COLL_REDUCE_SCATTER:
    case BRAID_COLL_ALLGATHER:
    case BRAID_COLL_BARRIER:
    case BRAID_COLL_COMM_SPLIT:
        return a->count == 0;
    default:
        return 0; /* point-to-point and new collectives opt in here */
    }
}

/* Checks a received header h (payload at buf) against this rank's call: what is expected is
 * a message of `bytes` payload bytes, header-only (HELLO) when hello is set. */
braid_result_t braid_run_check_header(run_t *r, braid_conn_t *conn, const braid_msg_hdr_t *h,
                                      const void *buf, size_t bytes, int hello)
{
    struct braid_comm *comm = r->comm;
    const braid_msg_hdr_t *e = &r->hdr;
    int theirs_rejected = (h->flags & BRAID_MSG_REJECTED) != 0;
    if (r->rejected) {
        if (h->seq == e->seq && theirs_rejected && h->coll == e->coll && h->count == e->count &&
            h->root == e->root) /* rejected there too (the same call, or fused run: group_fuse.c) */
            return BRAID_SUCCESS;
    } else if (same_call(h, e) && !theirs_rejected && !!(h->flags & BRAID_MSG_HELLO) == hello &&
               h->bytes == bytes) {
        return BRAID_SUCCESS;
    }
    /* A message of an earlier call (never read by this rank) is compared with that call. */
    const braid_msg_hdr_t *m = e;
    const braid_msg_hdr_t *old = &comm->hist[h->seq % BRAID_HIST];
    if (h->seq != e->seq && (int32_t)(e->seq - h->seq) > 0 && old->seq == h->seq) m = old;
    char theirs[160], mine[160];
    braid_engine_describe(theirs, sizeof(theirs), h);
    braid_engine_describe(mine, sizeof(mine), m);
    const char *mine_verb = m == e && r->rejected ? "rejected its" : "called";
    char mine_why[240] = "";
    if (m == e && r->rejected) snprintf(mine_why, sizeof(mine_why), " (%.200s)", r->reason);
    if (theirs_rejected) {
        char why[201];
        size_t n = h->bytes < sizeof(why) - 1 ? h->bytes : sizeof(why) - 1;
        if (n > conn->slot_size) n = conn->slot_size;
        memcpy(why, buf, n);
        why[n] = '\0';
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d rejected its %s (%s) but rank %d %s %s%s", conn->peer,
                               theirs, why, comm->rank, mine_verb, mine, mine_why);
    }
    if (!strcmp(theirs, mine) && !(m == e && r->rejected)) {
        if (m != e)
            return braid_set_error(BRAID_ERR_MISMATCH,
                                   "rank %d sent rank %d a message in %s that rank %d never read "
                                   "(the ranks ran the call differently); rank %d is in %s",
                                   conn->peer, comm->rank, theirs, comm->rank, comm->rank, mine);
        if (!!(h->flags & BRAID_MSG_HELLO) != hello)
            return braid_set_error(BRAID_ERR_INTERNAL,
                                   "rank %d sent %s where rank %d expected %s in %s", conn->peer,
                                   hello ? "data" : "a header-only message", comm->rank,
                                   hello ? "a header-only message" : "data", mine);
        return braid_set_error(BRAID_ERR_INTERNAL,
                               "rank %d sent %u bytes where rank %d expected %zu in %s", conn->peer,
                               h->bytes, comm->rank, bytes, mine);
    }
    return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d %s %s%s", conn->peer,
                           theirs, comm->rank, mine_verb, mine, mine_why);
}

/* Called while this rank sleeps: looks (without consuming) at the next message of every
 * incoming connection. One of this call's number with another descriptor, or one of an
 * earlier call (which this rank never read), is a mismatch; one of this call's number on a
 * connection the plan does not use (ring plans use the ring, the others the point-to-point
 * connections) means its sender runs another algorithm. Header-only messages of this call
 * are the descriptor exchange's. Errors of the connections are left to the waits that need
 * them (and to braid_comm_peer_failure, from the wait loop); messages of later calls (a peer
 * ahead of this rank) are normal. */
braid_result_t braid_run_check_foreign(run_t *r, int algo)
{
    struct braid_comm *comm = r->comm;
    for (int i = 0; i < comm->nchannels + comm->nranks; i++) {
        braid_conn_t *c;
        int used;
        if (i < comm->nchannels) {
            c = comm->ring[i].recv;
            used = algo == BRAID_PLAN_RING && !r->rejected;
        } else {
            if (!comm->p2p_recv) break;
            c = comm->p2p_recv[i - comm->nchannels];
            used = algo != BRAID_PLAN_RING && algo != BRAID_PLAN_DIRECT &&
                   algo != BRAID_PLAN_HIER && !r->rejected;
        }
        const braid_msg_hdr_t *h;
        const void *buf;
        if (!c || c->ops->recv_get(c, &h, &buf) != BRAID_SUCCESS || (h->flags & BRAID_MSG_ABORT))
            continue;
        if (h->seq != r->hdr.seq && (int32_t)(r->hdr.seq - h->seq) < 0) continue; /* ahead */
        if (r->part && i < comm->nchannels && same_call(h, r->part) &&
            !(h->flags & (BRAID_MSG_REJECTED | BRAID_MSG_HELLO)))
            continue; /* the call's own part on the ring (hier's tail) */
        if (h->seq != r->hdr.seq || r->rejected || !same_call(h, &r->hdr) ||
            (h->flags & BRAID_MSG_REJECTED))
            return braid_run_check_header(r, c, h, buf, h->bytes, !!(h->flags & BRAID_MSG_HELLO));
        if (used || (h->flags & BRAID_MSG_HELLO)) continue;
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d runs %s #%u with another algorithm than rank %d (%s)",
                               c->peer, braid_coll_name(r->a->coll), r->hdr.seq, comm->rank,
                               algo == BRAID_PLAN_RING     ? "ring"
                               : algo == BRAID_PLAN_TREE   ? "binomial tree"
                               : algo == BRAID_PLAN_DIRECT ? "direct shared memory"
                               : algo == BRAID_PLAN_HIER   ? "hierarchical"
                                                           : "recursive doubling");
    }
    /* Peers that run this number on the direct shared-memory segments (when this rank does
     * not), or a collective of core/p2p.h (alltoall, gather...). */
    int peer;
    braid_msg_hdr_t h;
    if (algo != BRAID_PLAN_DIRECT && braid_direct_peek(comm, r->hdr.seq, &peer, &h)) {
        braid_conn_t from = {.peer = peer, .comm = comm};
        if (r->rejected || !same_call(&h, &r->hdr))
            return braid_run_check_header(r, &from, &h, NULL, 0, 0); /* names both calls */
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d runs %s #%u on the direct shared-memory path but rank %d "
                               "runs it with another algorithm",
                               peer, braid_coll_name(h.coll), h.seq, comm->rank);
    }
    return braid_p2p_check_foreign(comm, &r->hdr);
}

braid_result_t braid_engine_check_foreign(struct braid_comm *comm, const braid_op_args_t *a,
                                          uint32_t seq)
{
    run_t r = {.comm = comm, .a = a, .es = braid_dtype_size(a->dtype)};
    r.hdr = braid_engine_desc(a, seq);
    return braid_run_check_foreign(&r, BRAID_PLAN_DIRECT);
}

braid_result_t braid_engine_check_parent(struct braid_comm *comm, const braid_op_args_t *a,
                                         const braid_op_args_t *part, uint32_t seq)
{
    run_t r = {.comm = comm, .a = a, .es = braid_dtype_size(a->dtype)};
    r.hdr = braid_engine_desc(a, seq);
    braid_msg_hdr_t ph;
    if (part) {
        ph = braid_engine_desc(part, seq);
        r.part = &ph;
    }
    return braid_run_check_foreign(&r, BRAID_PLAN_HIER);
}

/* The descriptor exchange: post this call's header-only message to the ring successor
 * (channel 0), or take the predecessor's. BRAID_INPROGRESS when the slot is not there yet. */
braid_result_t braid_run_give_hello(run_t *r)
{
    braid_conn_t *c = r->comm->ring[0].send;
    if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
    void *buf;
    braid_result_t res = c->ops->send_get(c, &buf);
    if (res != BRAID_SUCCESS) return res;
    braid_msg_hdr_t h = r->hdr;
    h.flags = BRAID_MSG_HELLO;
    h.bytes = 0;
    if (r->rejected) {
        size_t n = strlen(r->reason);
        if (n > 200) n = 200;
        if (n > c->slot_size) n = c->slot_size;
        memcpy(buf, r->reason, n);
        h.bytes = (uint32_t)n;
        h.flags |= BRAID_MSG_REJECTED;
    }
    BRAID_CHECK(c->ops->send_post(c, &h));
    r->hello_send = 0;
    return BRAID_SUCCESS;
}

braid_result_t braid_run_take_hello(run_t *r)
{
    braid_conn_t *c = r->comm->ring[0].recv;
    if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
    const braid_msg_hdr_t *h;
    const void *buf;
    braid_result_t res = c->ops->recv_get(c, &h, &buf);
    if (res != BRAID_SUCCESS) return res;
    BRAID_CHECK(braid_run_check_header(r, c, h, buf, 0, 1));
    BRAID_CHECK(c->ops->recv_release(c));
    r->hello_recv = 0;
    return BRAID_SUCCESS;
}

/* A peer that found a mismatch fails its connections and may be gone before this rank read
 * its notice: what this rank then sees first is the connection closing (BRAID_ERR_REMOTE).
 * The peer's descriptor may be waiting in a FIFO already: a mismatch visible there is the
 * cause to report. */
braid_result_t braid_run_better_cause(run_t *r, int algo, braid_result_t res)
{
    if (res != BRAID_ERR_REMOTE) return res;
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", braid_last_error());
    if (braid_run_check_foreign(r, algo) == BRAID_ERR_MISMATCH) return BRAID_ERR_MISMATCH;
    return braid_set_error(res, "%s", saved);
}
