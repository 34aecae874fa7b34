/* A communicator's connections, made at init and closed at destroy (split from comm.c): the
 * ring order over hosts and NUMA nodes, the channels' rings, the pairs of the latency
 * algorithms, and the general pair connector every connection set uses; a peer's failure
 * notice looked for on all of them (braid_comm_peer_failure). */
#include "algos/algo.h"
#include "algos/plan.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "core/p2p.h"
#include "topo/topo.h"
#include "transport/rdma.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One connection's setup info as the bootstrap allgather carries it. */
typedef struct {
    uint32_t len;
    uint8_t info[BRAID_CONN_INFO_BYTES];
} conn_blob_t;

/* The ring visits hosts one after the other (whatever order the launcher numbered ranks in),
 * so it crosses each host boundary once per direction, and within a host NUMA nodes one after
 * the other (each NUMA boundary once). */
braid_result_t braid_comm_order_ring(struct braid_comm *c)
{
    braid_topo_t t;
    c->ring_order = malloc((size_t)c->nranks * sizeof(int));
    int *numa = malloc((size_t)c->nranks * sizeof(int));
    if (!c->ring_order || !numa) {
        free(numa);
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the ring");
    }
    for (int r = 0; r < c->nranks; r++)
        numa[r] = c->peers[r].place.numa;
    braid_result_t res =
        braid_topo_group(c->nranks, c->peers[0].host, sizeof(braid_peer_info_t), &t);
    if (res != BRAID_SUCCESS) {
        free(numa);
        return res;
    }
    res = braid_topo_ring_order(c->nranks, t.host, numa, c->ring_order);
    if (res == BRAID_SUCCESS)
        braid_debug(INIT, "ring crosses hosts %d times, NUMA nodes within hosts %d times",
                    braid_topo_ring_crossings(c->nranks, t.host, c->ring_order),
                    braid_topo_ring_numa_crossings(c->nranks, t.host, numa, c->ring_order));
    braid_topo_free(&t);
    free(numa);
    BRAID_CHECK(res);
    for (int q = 0; q < c->nranks; q++)
        if (c->ring_order[q] == c->rank) c->ring_pos = q;
    return BRAID_SUCCESS;
}

/* Every channel uses the same ring order. Reversing every other channel (so both directions of
 * each link carry data) was tried and measured no gain: through a switch (netns bridge, 3 hosts
 * at 1 Gbit/s) a ring already sends and receives one stream per NIC and channel, and a
 * reversed ring only swaps which peer each NIC's streams go to. */
braid_result_t braid_comm_connect_rings(struct braid_comm *c)
{
    int n = c->nranks, nch = c->nchannels;
    if (n == 1) return BRAID_SUCCESS;
    braid_result_t res = BRAID_SUCCESS;
    conn_blob_t *mine = calloc((size_t)nch, sizeof(*mine));
    conn_blob_t *all = calloc((size_t)nch * (size_t)n, sizeof(*all));
    if (!mine || !all) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory connecting rings");
        goto out;
    }
    for (int ch = 0; ch < nch; ch++) {
        braid_ring_t *r = &c->ring[ch];
        r->prev = c->ring_order[(c->ring_pos + n - 1) % n];
        r->next = c->ring_order[(c->ring_pos + 1) % n];
        const braid_transport_t *t;
        BRAID_CHECK_GOTO(braid_comm_pick_transport(c, r->prev, &t), res, out);
        size_t len = BRAID_CONN_INFO_BYTES;
        BRAID_CHECK_GOTO(t->recv_setup(c, r->prev, ch, &r->recv, mine[ch].info, &len), res, out);
        mine[ch].len = (uint32_t)len;
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(c->boot, mine, all, (size_t)nch * sizeof(*mine)), res,
                     out);
    for (int ch = 0; ch < nch; ch++) {
        braid_ring_t *r = &c->ring[ch];
        const braid_transport_t *t;
        BRAID_CHECK_GOTO(braid_comm_pick_transport(c, r->next, &t), res, out);
        conn_blob_t *b = &all[(size_t)r->next * (size_t)nch + (size_t)ch];
        BRAID_CHECK_GOTO(t->send_connect(c, r->next, ch, b->info, b->len, &r->send), res, out);
    }
    BRAID_CHECK_GOTO(braid_boot_barrier(c->boot), res, out);
    for (int ch = 0; ch < nch; ch++)
        BRAID_CHECK_GOTO(c->ring[ch].recv->ops->recv_accept(c->ring[ch].recv), res, out);
    for (int ch = 0; ch < nch; ch++)
        braid_info(INIT, "rank %d channel %d: send to %d via %s, receive from %d via %s", c->rank,
                   ch, c->ring[ch].next, c->ring[ch].send->ops->name, c->ring[ch].prev,
                   c->ring[ch].recv->ops->name);
out:
    free(mine);
    free(all);
    return res;
}

/* Connections for arbitrary pairs (declared in comm.h). The receivers' blobs go through one
 * bootstrap allgather of max_in entries per rank; transports as for the rings. */
typedef struct {
    int32_t from; /* -1 = unused entry */
    conn_blob_t b;
} pair_blob_t;

braid_result_t braid_comm_connect_pairs(struct braid_comm *c, int channel, braid_conn_t **send_arr,
                                        braid_conn_t **recv_arr, size_t slot_bytes, int max_slots,
                                        const int *send_to, int nsend, const int *recv_from,
                                        int nrecv, int max_in)
{
    int n = c->nranks;
    braid_result_t res = BRAID_SUCCESS;
    size_t saved_chunk = c->chunk_bytes;
    int saved_slots = c->nslots;
    pair_blob_t *mine = calloc((size_t)max_in, sizeof(*mine));
    pair_blob_t *all = calloc((size_t)max_in * (size_t)n, sizeof(*all));
    if (!mine || !all) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory connecting peers");
        goto out;
    }
    if (nrecv > max_in) {
        res =
            braid_set_error(BRAID_ERR_INTERNAL, "connect_pairs: %d receivers > %d", nrecv, max_in);
        goto out;
    }
    /* The transports size a connection's slots from the communicator at setup (both ends):
     * smaller ones for these, restored below. */
    c->chunk_bytes = slot_bytes;
    if (c->nslots > max_slots) c->nslots = max_slots;
    for (int i = 0; i < max_in; i++)
        mine[i].from = -1;
    for (int i = 0; i < nrecv; i++) {
        int from = recv_from[i];
        const braid_transport_t *t;
        BRAID_CHECK_GOTO(braid_comm_pick_transport(c, from, &t), res, out);
        size_t len = BRAID_CONN_INFO_BYTES;
        BRAID_CHECK_GOTO(t->recv_setup(c, from, channel, &recv_arr[from], mine[i].b.info, &len),
                         res, out);
        mine[i].from = from;
        mine[i].b.len = (uint32_t)len;
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(c->boot, mine, all, (size_t)max_in * sizeof(*mine)), res,
                     out);
    for (int i = 0; i < nsend; i++) {
        int to = send_to[i];
        const pair_blob_t *b = NULL;
        for (int j = 0; j < max_in && !b; j++)
            if (all[(size_t)to * (size_t)max_in + (size_t)j].from == c->rank)
                b = &all[(size_t)to * (size_t)max_in + (size_t)j];
        if (!b || b->b.len > BRAID_CONN_INFO_BYTES) {
            res = braid_set_error(BRAID_ERR_INTERNAL, "rank %d published no connection for rank %d",
                                  to, c->rank);
            goto out;
        }
        const braid_transport_t *t;
        BRAID_CHECK_GOTO(braid_comm_pick_transport(c, to, &t), res, out);
        BRAID_CHECK_GOTO(t->send_connect(c, to, channel, b->b.info, b->b.len, &send_arr[to]), res,
                         out);
    }
    c->chunk_bytes = saved_chunk;
    c->nslots = saved_slots;
    BRAID_CHECK_GOTO(braid_boot_barrier(c->boot), res, out);
    for (int i = 0; i < nrecv; i++)
        BRAID_CHECK_GOTO(recv_arr[recv_from[i]]->ops->recv_accept(recv_arr[recv_from[i]]), res,
                         out);
out:
    c->chunk_bytes = saved_chunk;
    c->nslots = saved_slots;
    free(mine);
    free(all);
    return res;
}

/* The pairs of the latency algorithms (recursive doubling, and the binomial trees of every
 * root up to BRAID_TREE_MAX_RANKS ranks: each partner both ways). */
braid_result_t braid_comm_connect_latency(struct braid_comm *c)
{
    int n = c->nranks;
    c->p2p_chunk_bytes =
        c->chunk_bytes < BRAID_P2P_MAX_CHUNK ? c->chunk_bytes : BRAID_P2P_MAX_CHUNK;
    if (n == 1) return BRAID_SUCCESS;
    c->p2p_send = calloc((size_t)n, sizeof(*c->p2p_send));
    c->p2p_recv = calloc((size_t)n, sizeof(*c->p2p_recv));
    if (!c->p2p_send || !c->p2p_recv)
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d peer connections", n);
    int peers[128], max_in = 0;
    for (int r = 0; r < n; r++) {
        int k = braid_p2p_peers(n, r, peers, 0);
        if (k > max_in) max_in = k;
    }
    int np = braid_p2p_peers(n, c->rank, peers, 128);
    BRAID_CHECK(braid_comm_connect_pairs(c, BRAID_P2P_CHANNEL, c->p2p_send, c->p2p_recv,
                                         c->p2p_chunk_bytes, BRAID_P2P_MAX_SLOTS, peers, np, peers,
                                         np, max_in));
    for (int i = 0; i < np; i++)
        braid_debug(INIT, "rank %d: point-to-point with %d via %s", c->rank, peers[i],
                    c->p2p_send[peers[i]]->ops->name);
    return BRAID_SUCCESS;
}

void braid_comm_close_conns(struct braid_comm *c)
{
    braid_p2p_close(c);
    for (int ch = 0; ch < BRAID_MAX_CHANNELS; ch++) {
        braid_ring_t *r = &c->ring[ch];
        if (r->send) r->send->ops->close(r->send);
        if (r->recv) r->recv->ops->close(r->recv);
        r->send = r->recv = NULL;
    }
    for (int p = 0; c->p2p_send && p < c->nranks; p++) {
        if (c->p2p_send[p]) c->p2p_send[p]->ops->close(c->p2p_send[p]);
        if (c->p2p_recv[p]) c->p2p_recv[p]->ops->close(c->p2p_recv[p]);
    }
    free(c->p2p_send);
    free(c->p2p_recv);
    c->p2p_send = c->p2p_recv = NULL;
}

/* A wait looks at its own connection only; a rank blocked on one peer while another peer
 * failed the communicator (found a mismatch, timed out) learns it here instead of waiting out
 * its timeout in a cycle of ranks that wait on each other (a rejected call under recursive
 * doubling at 7 ranks did). */
braid_result_t braid_comm_peer_failure(struct braid_comm *comm)
{
    /* Both directions: a notice also comes back the other way (tcp: on the receiver's socket
     * to the sender). */
    int n = comm->nranks, nch = comm->nchannels;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nch + 2 * n; i++) {
            braid_conn_t *c = NULL;
            if (i < nch)
                c = d ? comm->ring[i].send : comm->ring[i].recv;
            else if (i < nch + n && comm->p2p_recv)
                c = d ? comm->p2p_send[i - nch] : comm->p2p_recv[i - nch];
            else if (i >= nch + n && comm->p2p)
                c = braid_p2p_conn(comm, i - nch - n, d);
            if (c && c->ops->peer_failed) BRAID_CHECK(c->ops->peer_failed(c));
        }
    return BRAID_SUCCESS;
}
