/* Point-to-point connections (every pair gets one each way at init, for braid_send/braid_recv
 * and the collectives built on them) and the batches of operations the runner (p2p.c) takes;
 * see p2p.h for the message format and the batch model. */
#include "core/config.h"
#include "core/log.h"
#include "core/copy.h"
#include "core/p2p_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- connections ----------------------------------------------------------------------- */
braid_result_t braid_p2p_connect(struct braid_comm *comm)
{
    int n = comm->nranks;
    struct braid_p2p_state *st = calloc(1, sizeof(*st));
    if (!st) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for send/recv state");
    comm->p2p = st;
    st->send = calloc((size_t)n, sizeof(*st->send));
    st->recv = calloc((size_t)n, sizeof(*st->recv));
    st->send_seq = calloc((size_t)n, sizeof(*st->send_seq));
    st->recv_seq = calloc((size_t)n, sizeof(*st->recv_seq));
    st->ntpick = calloc((size_t)n, sizeof(*st->ntpick));
    st->ntrx = calloc((size_t)n, sizeof(*st->ntrx));
    st->recv_notice = calloc((size_t)n, sizeof(*st->recv_notice));
    if (!st->send || !st->recv || !st->send_seq || !st->recv_seq || !st->ntpick || !st->ntrx ||
        !st->recv_notice)
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d send/recv peers", n);
    /* The collectives' slot size; fewer slots, and the latency plans' smaller slots beyond 16
     * ranks, bound the memory of n - 1 receive connections per rank. */
    st->chunk = n <= 16 ? comm->chunk_bytes : comm->p2p_chunk_bytes;
    int slots = n <= 16 ? 4 : BRAID_P2P_MAX_SLOTS;
    if (n == 1) return BRAID_SUCCESS;
    /* Over tcp larger messages (fewer frames and wakeups per byte) up to 8 ranks (2 sockets
     * per peer were faster at n = 2 too, but not the default: a peer's ABORT comes back on
     * socket 0 only, so a send failing on another socket may report a closed connection
     * instead of the peer's reason); the reducing receive keeps the messages of st->chunk (every
     * rank must agree on them, whatever transport each pair uses), hence never smaller. */
    int64_t v = comm->p2p_tcp_chunk_set; /* read and agreed on at init (core/settings.c) */
    size_t tslot = v ? (size_t)v : n <= 8 ? (size_t)512 << 10 : st->chunk;
    if (tslot > ((size_t)64 << 20))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_P2P_TCP_CHUNK_SIZE=%zu is above 64 MiB", tslot);
    tslot &= ~(size_t)63;
    if (tslot < st->chunk) tslot = st->chunk;
    BRAID_CHECK(braid_param_int("P2P_TCP_NSOCKS", &v));
    comm->tcp_conn_slot = tslot;
    comm->tcp_conn_nsocks = (int)v; /* 0: BRAID_NSOCKS_PERPEER's */
    int *peers = calloc((size_t)n, sizeof(*peers));
    if (!peers) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d peers", n);
    int np = 0;
    for (int p = 0; p < n; p++)
        if (p != comm->rank) peers[np++] = p;
    braid_result_t res = braid_comm_connect_pairs(comm, BRAID_SENDRECV_CHANNEL, st->send, st->recv,
                                                  st->chunk, slots, peers, np, peers, np, n - 1);
    comm->tcp_conn_slot = 0;
    comm->tcp_conn_nsocks = 0;
    free(peers);
    BRAID_CHECK(res);
    for (int p = 0; p < n; p++)
        if (st->send[p] && st->send[p]->slot_size < st->chunk) st->chunk = st->send[p]->slot_size;
    BRAID_CHECK(braid_p2p_cma_connect(comm, st->send, st->recv, &st->cma));
    braid_debug(INIT, "rank %d: send/recv connections to %d ranks, %zu B messages", comm->rank,
                n - 1, st->chunk);
    return BRAID_SUCCESS;
}

void braid_p2p_close(struct braid_comm *comm)
{
    struct braid_p2p_state *st = comm->p2p;
    if (!st) return;
    for (int p = 0; st->cma && st->cma->measured && p < comm->nranks; p++) {
        braid_conn_t *c = st->send ? st->send[p] : NULL;
        if (!c || !st->cma->picked[p]) continue;
        uint64_t ps[2];
        braid_p2p_cma_costs(st->cma, c, p, ps);
        braid_debug(SHM,
                    "messages of %zu bytes or more to rank %d: %llu, copied at %.2f GB/s by the "
                    "slots (both ends' copies), %.2f GB/s by single copy; taking %s",
                    st->cma->min_bytes, p, (unsigned long long)st->cma->picked[p],
                    ps[0] ? 1000.0 / (double)ps[0] : 0.0, ps[1] ? 1000.0 / (double)ps[1] : 0.0,
                    braid_p2p_cma_pick(BRAID_CMA_PICK_TRIAL, ps[0], ps[1], 0) ? "single copy"
                                                                              : "the slots");
    }
    for (int p = 0; p < comm->nranks && st->send; p++) {
        if (st->send[p]) st->send[p]->ops->close(st->send[p]);
        if (st->recv && st->recv[p]) st->recv[p]->ops->close(st->recv[p]);
    }
    while (st->self_head) {
        self_msg_t *m = st->self_head;
        st->self_head = m->next;
        free(m);
    }
    for (int p = 0; st->ntpick && p < comm->nranks; p++) {
        const braid_nt_pick_t *k = &st->ntpick[p];
        if (k->timed)
            braid_debug(SHM,
                        "send slots to rank %d: plain stores %.2f GB/s (%llu copies; its copies "
                        "out %.2f GB/s), streaming %.2f GB/s (%llu; out %.2f GB/s), taking %s",
                        p, k->ns_per_byte[0] > 0 ? 1 / k->ns_per_byte[0] : 0.0,
                        (unsigned long long)k->count[0],
                        k->rx_ns_per_byte[0] > 0 ? 1 / k->rx_ns_per_byte[0] : 0.0,
                        k->ns_per_byte[1] > 0 ? 1 / k->ns_per_byte[1] : 0.0,
                        (unsigned long long)k->count[1],
                        k->rx_ns_per_byte[1] > 0 ? 1 / k->rx_ns_per_byte[1] : 0.0,
                        braid_nt_pick_best(k) ? "streaming" : "plain");
    }
    braid_p2p_cma_free(st->cma);
    free(st->ntpick);
    free(st->ntrx);
    free(st->send);
    free(st->recv);
    free(st->send_seq);
    free(st->recv_seq);
    free(st->recv_notice);
    free(st);
    comm->p2p = NULL;
}

int braid_p2p_self_pending(struct braid_comm *comm)
{
    return comm->p2p && comm->p2p->self_head != NULL;
}

void braid_p2p_fail_peers(struct braid_comm *comm, braid_result_t code, const char *why)
{
    struct braid_p2p_state *st = comm->p2p;
    for (int p = 0; st && st->send && p < comm->nranks; p++) {
        if (st->send[p]) st->send[p]->ops->fail(st->send[p], code, why);
        if (st->recv[p]) st->recv[p]->ops->fail(st->recv[p], code, why);
    }
}

/* shm slots are read by the peer's cpu next; a tcp or rdma slot by this process or its NIC,
 * which plain stores leave in the cache for. */
uint8_t braid_p2p_copy_to_slot(struct braid_p2p_state *st, braid_conn_t *c, int peer, void *slot,
                               const void *src, size_t nb)
{
    if (c->ops != &braid_transport_shm || c->comm->p2p_nt_slots == 0) {
        braid_copy(slot, src, nb);
        return 0;
    }
    if (c->comm->p2p_nt_slots == 1) {
        braid_copy_shared(slot, src, nb, 1);
        return nb >= BRAID_SHM_NT_BYTES ? BRAID_MSG_NT : 0;
    }
    braid_nt_pick_t *p = &st->ntpick[peer];
    for (int k = 0; nb >= BRAID_NT_PICK_MIN && k < 2; k++) /* read by timed copies only */
        p->rx_ns_per_byte[k] = (double)braid_shm_rx_cost_get(c, k) / 1000.0;
    return braid_copy_picked(p, slot, src, nb) ? BRAID_MSG_NT : 0;
}

void braid_p2p_copy_from_slot(struct braid_p2p_state *st, braid_conn_t *c, int peer, void *dst,
                              const void *slot, size_t nb, uint8_t flags)
{
    if (c->ops != &braid_transport_shm || c->comm->p2p_nt_slots != 2) {
        braid_copy(dst, slot, nb);
        return;
    }
    int nt = (flags & BRAID_MSG_NT) != 0;
    uint64_t ps = braid_copy_from_picked(&st->ntrx[peer], dst, slot, nb, nt);
    if (ps) braid_shm_rx_cost_set(c, nt, ps);
}

/* ---- header checks --------------------------------------------------------------------- */
braid_conn_t *braid_p2p_conn(struct braid_comm *comm, int peer, int is_send)
{
    struct braid_p2p_state *st = comm->p2p;
    if (!st || !st->send || peer < 0 || peer >= comm->nranks) return NULL;
    return is_send ? st->send[peer] : st->recv[peer];
}

uint32_t braid_p2p_sent(struct braid_comm *comm, int peer)
{
    return comm->p2p->send_seq[peer];
}

int braid_p2p_cma_peer(struct braid_comm *comm, int peer)
{
    struct braid_p2p_state *st = comm->p2p;
    return st && st->cma && peer >= 0 && peer < comm->nranks && st->cma->send_ok[peer];
}

uint64_t braid_p2p_cma_pulls(struct braid_comm *comm, uint64_t *bytes_p)
{
    struct braid_p2p_state *st = comm->p2p;
    if (bytes_p)
        *bytes_p = st && st->cma ? atomic_load_explicit(&st->cma->pulled, memory_order_relaxed) : 0;
    return st && st->cma ? st->cma->pulls : 0;
}

uint64_t braid_p2p_cma_pushed(struct braid_comm *comm, int *help_p)
{
    struct braid_p2p_state *st = comm->p2p;
    if (help_p) *help_p = st && st->cma ? st->cma->help : 0;
    return st && st->cma ? atomic_load_explicit(&st->cma->pushed, memory_order_relaxed) : 0;
}

void braid_p2p_cma_test_stall(struct braid_comm *comm, uint64_t stall_ns, int leave_first)
{
    struct braid_p2p_state *st = comm->p2p;
    if (!st || !st->cma) return;
    st->cma->test_stall_ns = stall_ns;
    st->cma->test_leave_first = leave_first;
}

void braid_p2p_cma_test_scale(struct braid_comm *comm, int cma_path, double factor)
{
    struct braid_p2p_state *st = comm->p2p;
    if (st && st->cma) st->cma->test_scale[cma_path != 0] = factor;
}

int braid_p2p_cma_test_stalled(struct braid_comm *comm)
{
    struct braid_p2p_state *st = comm->p2p;
    return st && st->cma && atomic_load_explicit(&st->cma->test_stalled, memory_order_acquire);
}

/* ---- batches ---------------------------------------------------------------------------- */
braid_result_t braid_p2p_batch_add(braid_p2p_batch_t *b, const braid_p2p_op_t *op)
{
    if (b->nops == b->cap) {
        /* From 4 (544 bytes): glibc's per-thread cache serves up to 1 KiB without touching
         * its bins (8 operations were 1088 bytes). */
        int cap = b->cap ? b->cap * 2 : 4;
        braid_p2p_op_t *n =
            b->heap ? realloc(b->ops, (size_t)cap * sizeof(*n)) : malloc((size_t)cap * sizeof(*n));
        if (!n) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d operations", cap);
        if (!b->heap && b->nops) memcpy(n, b->ops, (size_t)b->nops * sizeof(*n));
        b->ops = n;
        b->cap = cap;
        b->heap = 1;
    }
    b->ops[b->nops] = *op;
    b->ops[b->nops].off = 0;
    b->ops[b->nops].nmsgs = 0;
    b->ops[b->nops].done = 0;
    b->ops[b->nops].next = -1;
    b->ops[b->nops].noticed = 0;
    b->ops[b->nops].cma = 0;
    b->ops[b->nops].cma_slot = NULL;
    b->ops[b->nops].cma_pick = 0;
    b->ops[b->nops].timed = 0;
    b->ops[b->nops].copy_ns = 0;
    b->ops[b->nops].dev_buf = b->ops[b->nops].shadow = NULL;
    b->nops++;
    return BRAID_SUCCESS;
}

void braid_p2p_batch_free(braid_p2p_batch_t *b)
{
    for (int i = 0; i < b->nops; i++) /* a staged operation that never ran */
        braid_dev_shadow_put(b->ops[i].shadow);
    if (b->heap) free(b->ops);
    b->ops = NULL;
    b->nops = b->cap = b->heap = 0;
}

void braid_p2p_assign_seq(struct braid_comm *comm, braid_p2p_batch_t *b, int from)
{
    struct braid_p2p_state *st = comm->p2p;
    for (int i = from; i < b->nops; i++) {
        braid_p2p_op_t *op = &b->ops[i];
        if (op->coll != BRAID_COLL_SEND) continue;
        op->seq = op->kind == BRAID_P2P_SEND ? ++st->send_seq[op->peer] : ++st->recv_seq[op->peer];
    }
}
