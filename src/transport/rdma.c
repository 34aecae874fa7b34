/* RDMA verbs transport (libibverbs + librdmacm): RC queue pairs, BRAID_IB_QPS_PER_CONN per
 * connection (default 1; message pos is written on QP pos % nqps and read in order).
 *
 * Setup (rdma_conn.c). The first recv_setup of a communicator opens an rdma_cm listener (port 0)
 * on the address of the port BRAID_IB_HCA / BRAID_IB_GID_INDEX choose, else the address
 * BRAID_SOCKET_IFNAME selects, else, when the host has several NICs with an active RDMA port
 * that reach every other host, that of one on the rank's NUMA node, else the local address
 * that routes to the bootstrap root (as tcp does; rdma_dev.c, core/netaddr.c), and starts a
 * thread serving its event channel. Every receive connection
 * registers its staging slots (nslots x (64-byte header + slot_size)) on the listener's device;
 * the info blob carries the listener address, the slots' address and rkey. send_connect
 * resolves the address and route, creates its QP and registered staging slots, and connects
 * with private data {magic, rank, channel, QP, nonce, MAC}; the receiver's thread finds the
 * receive connection whose nonce the MAC (keyed by the job secret) covers, creates its QP and
 * accepts with its own proof as private data, which the sender checks (rdma_impl.h,
 * rdma_hello_t; the secret never goes on the wire). recv_accept waits for ESTABLISHED.
 *
 * Data path (no syscalls). The engine writes a send slot in place; send_post puts the header
 * in front of the payload and RDMA-WRITEs header + payload WITH IMMEDIATE (immediate = message
 * sequence number) into the same slot of the receiver (inline when it fits). The receiver's
 * completion of that write (a consumed receive WR) tells it the slot is full (`arrived`; with
 * several QPs writes may complete out of order, each QP's in order, and slots are read in
 * order); recv_release
 * returns a credit: a zero-length SEND WITH IMMEDIATE carrying its release count. Both sides
 * poll their completion queue in send_get/recv_get; wait() arms the CQ's completion channel
 * and sleeps in poll() on it (and a wake eventfd, and the sender's rdma_cm channel).
 *
 * Zero-copy. For ring all-gather and broadcast the engine exposes each receive connection's
 * output buffer (recv_expose); if the user registered it (braid_comm_register, so it is in the
 * registration cache), the receiver sends {seq, address, rkey, bytes} to its sender (a SEND
 * WITH IMMEDIATE, control bit + RDMA_CTRL_EXPOSE). The sender's send_post_at then writes the
 * payload with a plain RDMA WRITE straight to that address + the step's output offset and the
 * 64-byte header (flagged zero-copy, with the offset) into the slot by WRITE WITH IMMEDIATE on
 * the same QP, so the header completes after the payload; recv_get returns a pointer into the
 * output, where the engine's copy has nothing left to do. Without an exposure for the same
 * collective (not registered, not arrived yet) messages take the staging path. An exposure
 * takes one of the sender's receive WRs until the sender polls its CQ; every message's header
 * says how many exposures the sender had polled by then, and a receiver with RDMA_MAX_EXPOSED
 * unreported ones sends no more (its sender's receive queue would run dry: RNR, the credits
 * stalled behind). Exposing is best effort: no room on the send queue, no exposure. When the
 * collective fails, the engine revokes the exposure (recv_revoke): the peer is told and the
 * connection's QPs go to the error state, so a late peer's writes cannot reach the output.
 *
 * Failures. A failed work completion, a DISCONNECTED (or device) event, or a peer's fail()
 * (a SEND WITH IMMEDIATE: top bit set, the error code, its text as payload) make the
 * connection failed: wait() then returns BRAID_ERR_REMOTE naming the peer (or the peer's
 * BRAID_ERR_MISMATCH). Messages that arrived before a failure stay readable. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "core/regcache.h"
#include "transport/rdma_impl.h"
#include "transport/rdma_pos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void braid_rdma_wake_fd(int fd)
{
    uint64_t one = 1;
    if (fd >= 0) {
        ssize_t n = write(fd, &one, sizeof(one));
        (void)n;
    }
}

void braid_rdma_set_failed(rdma_conn_t *c, braid_result_t code, const char *fmt, ...)
{
    int zero = 0;
    char msg[sizeof(c->fail_msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (atomic_load_explicit(&c->failed, memory_order_acquire)) return;
    memcpy(c->fail_msg, msg, sizeof(msg));
    if (atomic_compare_exchange_strong(&c->failed, &zero, (int)code))
        braid_info(NET, "rdma: %s", c->fail_msg);
    braid_rdma_wake_fd(c->wake_fd);
}

void braid_rdma_set_disconnected(rdma_conn_t *c, const char *fmt, ...)
{
    if (atomic_load_explicit(&c->disconnected, memory_order_acquire)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->disc_msg, sizeof(c->disc_msg), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&c->disconnected, 1, memory_order_release);
    braid_rdma_wake_fd(c->wake_fd);
}

braid_result_t braid_rdma_failure(rdma_conn_t *c)
{
    int code = atomic_load_explicit(&c->failed, memory_order_acquire);
    if (!code && atomic_load_explicit(&c->disconnected, memory_order_acquire)) {
        /* A fail() text that arrived before the disconnect names the real cause. */
        if (c->cq) braid_rdma_poll_cq(c);
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "%s", c->disc_msg);
        code = atomic_load_explicit(&c->failed, memory_order_acquire);
    }
    if (!code) return BRAID_SUCCESS;
    if (atomic_load_explicit(&c->base.comm->aborted, memory_order_relaxed))
        return braid_set_error(BRAID_ERR_ABORTED, "communicator %s",
                               braid_comm_abort_reason(c->base.comm));
    return braid_set_error(code, "%s", c->fail_msg);
}

/* ---- completions --------------------------------------------------------------------------- */

static void repost(rdma_conn_t *c, int q, uint32_t idx)
{
    if (braid_rdma_post_recv(c, q, idx))
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot repost a receive to %s (QP error)",
                              c->desc);
}

/* The receiver's exposure of its output buffer (zero-copy): the latest collective wins. */
static void on_expose(rdma_conn_t *c, const char *data, uint32_t len)
{
    rdma_expose_t e;
    c->exp_polled++; /* its receive WR is reposted next (reported in rdma_zc_t) */
    if (len != sizeof(e) || !c->base.is_send) {
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "rdma: %s sent a malformed exposure (%u bytes)",
                              c->desc, len);
        return;
    }
    memcpy(&e, data, sizeof(e));
    if (!c->exp_valid || (int32_t)(e.seq - c->exp.seq) > 0) {
        c->exp = e;
        c->exp_valid = 1;
    }
}

/* The peer's fail(): its code in the immediate, its text in the landing buffer. */
static void on_ctrl(rdma_conn_t *c, uint32_t imm, const char *data, uint32_t len)
{
    if (imm & RDMA_CTRL_EXPOSE) {
        on_expose(c, data, len);
        return;
    }
    braid_result_t code = -(braid_result_t)(imm & 0xff);
    char text[RDMA_TEXT];
    if (len > RDMA_TEXT - 1) len = RDMA_TEXT - 1;
    memcpy(text, data, len);
    text[len] = '\0';
    if (code == BRAID_ERR_MISMATCH)
        braid_rdma_set_failed(c, BRAID_ERR_MISMATCH, "%s", text[0] ? text : "collective mismatch");
    else
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "%.150s failed: %s", c->desc,
                              text[0] ? text : braid_strerror(code));
    atomic_store_explicit(&c->peer_fail, code ? code : BRAID_ERR_REMOTE, memory_order_release);
}

/* A data write arrived on QP q: messages on one QP come in order (rdma_pos.h). */
static void on_write(rdma_conn_t *c, int q, uint32_t imm)
{
    uint32_t want = c->rx_next[q];
    if (imm != (want & RDMA_SEQ_MASK)) {
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE,
                              "rdma: %s sent message %u on QP %d where %u was expected", c->desc,
                              imm, q, want & RDMA_SEQ_MASK);
        return;
    }
    c->arrived[want % c->nslots] = want + 1;
    c->rx_next[q] = braid_rdma_pos_next(want, (uint32_t)c->nqps);
}

void braid_rdma_poll_cq(rdma_conn_t *c)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            unsigned kind = (unsigned)(wc[i].wr_id & 0xff);
            int q = (int)((wc[i].wr_id >> 8) & 0xff);
            uint32_t idx = (uint32_t)(wc[i].wr_id >> 16);
            if (q >= c->nqps) q = 0;
            int counted = kind != RDMA_WR_RECV;
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (wc[i].status != IBV_WC_WR_FLUSH_ERR ||
                    (!atomic_load(&c->failed) && !atomic_load(&c->disconnected)))
                    braid_rdma_set_failed(
                        c, BRAID_ERR_REMOTE,
                        "rdma: work completion to/from %s failed: %s (vendor error %u)", c->desc,
                        ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
                /* Only wr_id is valid in a failed completion. */
                if (counted && c->sq_out[q]) c->sq_out[q]--;
                continue;
            }
            if (kind == RDMA_WR_RECV) {
                uint32_t imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
                if (idx >= c->rq_depth) idx = 0;
                if (imm & RDMA_CTRL)
                    on_ctrl(c, imm, braid_rdma_landing(c, q, idx), wc[i].byte_len);
                else if (c->base.is_send)
                    c->tail += (imm - c->tail) & RDMA_SEQ_MASK;
                else
                    on_write(c, q, imm);
                repost(c, q, idx);
            } else if (counted && c->sq_out[q]) {
                c->sq_out[q]--;
            }
        }
    }
    if (n < 0)
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "rdma: ibv_poll_cq failed on %s", c->desc);
}

/* Makes room for `need` more work requests on the send queue of QP q. */
static braid_result_t sq_room(rdma_conn_t *c, int q, uint32_t need)
{
    uint64_t deadline = 0;
    while (c->sq_out[q] + 1 + need >= c->sq_max) { /* two kept for fail() */
        braid_rdma_poll_cq(c);
        BRAID_CHECK(braid_rdma_failure(c));
        if (atomic_load_explicit(&c->base.comm->aborted, memory_order_relaxed))
            return braid_set_error(BRAID_ERR_ABORTED, "rdma: aborted waiting to send to %s: %s",
                                   c->desc, braid_comm_abort_reason(c->base.comm));
        if (!deadline) deadline = braid_now_ns() + braid_timeout_ns(c->base.comm->timeout_s);
        if (braid_now_ns() > deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT, "rdma: send queue to %s stuck", c->desc);
    }
    return BRAID_SUCCESS;
}

/* ---- data path ----------------------------------------------------------------------------- */

static braid_result_t rdma_send_get(braid_conn_t *conn, void **buf_p)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    BRAID_CHECK(braid_rdma_failure(c)); /* a failed peer takes nothing more */
    if (c->pos - c->tail >= c->nslots) {
        braid_rdma_poll_cq(c);
        if (c->pos - c->tail >= c->nslots) return BRAID_INPROGRESS;
    }
    *buf_p = c->buf + (size_t)(c->pos % c->nslots) * c->stride + RDMA_HDR;
    return BRAID_SUCCESS;
}

/* Posts the message in slot pos: header + payload by one WRITE WITH IMMEDIATE into the same
 * slot of the receiver; or, with zc, the payload first by a WRITE to zc_addr (the receiver's
 * exposed buffer) and then the header alone, saying where the payload went. Both go on the
 * same QP, so the header's completion at the receiver follows the payload. */
static braid_result_t post_msg(rdma_conn_t *c, const braid_msg_hdr_t *hdr, int zc, uint64_t zc_off)
{
    /* Nothing more to a failed peer: after its fail() it may have returned from the
     * collective whose output it exposed (its QPs are in the error state, too). */
    BRAID_CHECK(braid_rdma_failure(c));
    int q = braid_rdma_pos_qp(c->pos, (uint32_t)c->nqps);
    BRAID_CHECK(sq_room(c, q, zc ? 2 : 1));
    size_t off = (size_t)(c->pos % c->nslots) * c->stride;
    memcpy(c->buf + off, hdr, sizeof(*hdr));
    rdma_zc_t z = {.zc = (uint32_t)zc, .exp_polled = c->exp_polled, .off = zc_off};
    memcpy(c->buf + off + RDMA_ZC_AT, &z, sizeof(z));
    uint32_t len = RDMA_HDR + (zc ? 0 : hdr->bytes);
    struct ibv_sge sge = {
        .addr = (uint64_t)(uintptr_t)(c->buf + off), .length = len, .lkey = c->mr->lkey};
    struct ibv_sge zsge = {.addr = (uint64_t)(uintptr_t)(c->buf + off + RDMA_HDR),
                           .length = hdr->bytes,
                           .lkey = c->mr->lkey};
    struct ibv_send_wr wr =
                           {
                               .wr_id = RDMA_WR_ID(RDMA_WR_WRITE, q),
                               .sg_list = &sge,
                               .num_sge = 1,
                               .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                               .send_flags =
                                   IBV_SEND_SIGNALED | (len <= c->max_inline ? IBV_SEND_INLINE : 0),
                               .imm_data = htonl(c->pos & RDMA_SEQ_MASK),
                               .wr.rdma = {.remote_addr = c->raddr + off, .rkey = c->rkey},
                           },
                       zwr = {.wr_id = RDMA_WR_ID(RDMA_WR_ZC, q),
                              .next = &wr,
                              .sg_list = &zsge,
                              .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE,
                              .send_flags = IBV_SEND_SIGNALED |
                                            (hdr->bytes <= c->max_inline ? IBV_SEND_INLINE : 0),
                              .wr.rdma = {.remote_addr = c->exp.addr + zc_off,
                                          .rkey = c->exp.rkey}},
                       *bad;
    if (ibv_post_send(c->ids[q]->qp, zc ? &zwr : &wr, &bad)) {
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot post a write to %s (QP error)",
                              c->desc);
        return braid_rdma_failure(c);
    }
    c->sq_out[q] += zc ? 2 : 1;
    c->zc_msgs += zc ? 1 : 0;
    c->pos++;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_send_post(braid_conn_t *conn, const braid_msg_hdr_t *hdr)
{
    return post_msg((rdma_conn_t *)conn, hdr, 0, 0);
}

braid_result_t braid_rdma_send_post_at(braid_conn_t *conn, const braid_msg_hdr_t *hdr,
                                       size_t dst_off)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (!hdr->bytes) return post_msg(c, hdr, 0, 0);
    if (!c->exp_valid || c->exp.seq != hdr->seq) braid_rdma_poll_cq(c); /* an exposure? */
    int zc = c->exp_valid && c->exp.seq == hdr->seq && dst_off <= c->exp.bytes &&
             hdr->bytes <= c->exp.bytes - dst_off;
    return post_msg(c, hdr, zc, dst_off);
}

void braid_rdma_recv_expose(braid_conn_t *conn, uint32_t seq, void *base, size_t bytes)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (c->exp_entry) {
        braid_regcache_put(c->st->rc, c->exp_entry);
        c->exp_entry = NULL;
    }
    c->exp_valid = 0;
    /* Only buffers the user registered (in the cache), and only when the exposure can be sent
     * inline (its buffer is reused by the next one), the sender has room for it in its receive
     * queue (RDMA_MAX_EXPOSED) and this side in its send queue: best effort, never a wait. */
    if (!base || !bytes || !c->st || !c->st->rc || c->pd != c->st->pd ||
        !braid_rdma_all_connected(c) || c->max_inline < sizeof(rdma_expose_t) ||
        atomic_load(&c->failed) || c->exp_sent - c->exp_polled >= RDMA_MAX_EXPOSED)
        return;
    if (c->sq_out[0] + 2 >= c->sq_max) braid_rdma_poll_cq(c); /* as sq_room(c, 0, 1) */
    if (c->sq_out[0] + 2 >= c->sq_max) return;
    braid_reg_entry_t *e = NULL;
    if (braid_regcache_get(c->st->rc, base, bytes, &e) != BRAID_SUCCESS || !e) return;
    struct ibv_mr *mr = e->handle;
    c->exp = (rdma_expose_t){
        .seq = seq, .rkey = mr->rkey, .addr = (uint64_t)(uintptr_t)base, .bytes = bytes};
    memcpy(c->tx_exp, &c->exp, sizeof(c->exp));
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)c->tx_exp,
                          .length = sizeof(rdma_expose_t),
                          .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_EXPOSE, 0),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                             .imm_data = htonl(RDMA_CTRL | RDMA_CTRL_EXPOSE)},
                       *bad;
    if (ibv_post_send(c->ids[0]->qp, &wr, &bad)) {
        braid_regcache_put(c->st->rc, e);
        return; /* the QP failed: the data path reports it */
    }
    c->sq_out[0]++;
    c->exp_sent++;
    c->exp_entry = e;
    c->exp_valid = 1;
}

static int arrived(rdma_conn_t *c)
{
    return c->arrived[c->pos % c->nslots] == c->pos + 1;
}

static braid_result_t rdma_recv_get(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                                    const void **buf_p)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (!arrived(c)) {
        braid_rdma_poll_cq(c);
        if (!arrived(c)) return BRAID_INPROGRESS;
    }
    char *slot = c->buf + (size_t)(c->pos % c->nslots) * c->stride;
    const braid_msg_hdr_t *h = (const braid_msg_hdr_t *)slot;
    if (h->bytes > c->base.slot_size)
        return braid_set_error(BRAID_ERR_REMOTE, "rdma: %s sent %u bytes in a %zu-byte slot",
                               c->desc, h->bytes, c->base.slot_size);
    rdma_zc_t z;
    memcpy(&z, slot + RDMA_ZC_AT, sizeof(z));
    c->exp_polled = z.exp_polled; /* messages are read in order: the count only grows */
    if (z.zc) {
        /* The payload is already in the exposed output buffer. */
        if (!c->exp_valid || h->seq != c->exp.seq || z.off > c->exp.bytes ||
            h->bytes > c->exp.bytes - z.off)
            return braid_set_error(BRAID_ERR_REMOTE,
                                   "rdma: %s wrote %u bytes at offset %llu of a buffer this side "
                                   "did not expose for #%u",
                                   c->desc, h->bytes, (unsigned long long)z.off, h->seq);
        *hdr_p = h;
        *buf_p = (const char *)(uintptr_t)c->exp.addr + z.off;
        c->zc_msgs++;
        return BRAID_SUCCESS;
    }
    *hdr_p = h;
    *buf_p = slot + RDMA_HDR;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_recv_release(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    c->pos++;
    /* A disconnected peer takes no more credits; a wait for its next message reports it. */
    if (atomic_load_explicit(&c->disconnected, memory_order_acquire)) return BRAID_SUCCESS;
    BRAID_CHECK(sq_room(c, 0, 1));
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_CREDIT, 0),
                             .sg_list = NULL,
                             .num_sge = 0,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                             .imm_data = htonl(c->pos & RDMA_SEQ_MASK)},
                       *bad;
    if (ibv_post_send(c->ids[0]->qp, &wr, &bad)) {
        braid_rdma_set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot return a credit to %s (QP error)",
                              c->desc);
        return braid_rdma_failure(c);
    }
    c->sq_out[0]++;
    return BRAID_SUCCESS;
}

static int ready(rdma_conn_t *c, braid_wait_dir_t dir)
{
    if (dir == BRAID_WAIT_RECV) return arrived(c);
    return c->pos - c->tail < c->nslots;
}

/* The connection's failure for a wait, unless what a receive waits for arrived before it: a
 * peer that completed its last write and then destroyed its communicator (its close lets the
 * writes complete first) leaves that message readable, and braid_rdma_failure polled the
 * completion queue once more after the disconnect. */
static braid_result_t wait_failure(rdma_conn_t *c, braid_wait_dir_t dir)
{
    braid_result_t f = braid_rdma_failure(c);
    if (f != BRAID_SUCCESS && dir == BRAID_WAIT_RECV && arrived(c)) {
        braid_clear_error();
        return BRAID_SUCCESS;
    }
    return f;
}

/* Handles the sender's own rdma_cm events (a DISCONNECTED). */
static void sender_events(rdma_conn_t *c)
{
    struct rdma_cm_event *ev;
    while (c->ch && rdma_get_cm_event(c->ch, &ev) == 0) {
        enum rdma_cm_event_type t = ev->event;
        rdma_ack_cm_event(ev);
        if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)
            braid_rdma_set_disconnected(c, "%s disconnected (%s)", c->desc, rdma_event_str(t));
    }
}

static braid_result_t rdma_wait(braid_conn_t *conn, braid_wait_dir_t dir, uint64_t deadline_ns)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    braid_rdma_poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    if (conn->is_send) sender_events(c);
    BRAID_CHECK(wait_failure(c, dir));
    uint64_t now = braid_now_ns();
    if (now >= deadline_ns) return BRAID_SUCCESS;
    ibv_req_notify_cq(c->cq, 0);
    braid_rdma_poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    uint64_t ms = (deadline_ns - now) / 1000000 + 1;
    struct pollfd p[3] = {{.fd = c->cc->fd, .events = POLLIN},
                          {.fd = c->wake_fd, .events = POLLIN},
                          {.fd = c->ch ? c->ch->fd : -1, .events = POLLIN}};
    poll(p, 3, ms > 50 ? 50 : (int)ms);
    struct ibv_cq *cq;
    void *ctx;
    while (ibv_get_cq_event(c->cc, &cq, &ctx) == 0)
        c->cq_events++;
    if (c->cq_events >= 64) {
        ibv_ack_cq_events(c->cq, c->cq_events);
        c->cq_events = 0;
    }
    uint64_t v;
    ssize_t n = read(c->wake_fd, &v, sizeof(v));
    (void)n;
    braid_rdma_poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    if (conn->is_send) sender_events(c);
    return wait_failure(c, dir);
}

/* The peer's fail() notice (transport.h): what the completions this thread polls now hold;
 * not the peer's own abort or timeout, nor a disconnect or a QP error. */
static braid_result_t rdma_peer_failed(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (c->cq && atomic_load_explicit(&c->connected, memory_order_acquire)) braid_rdma_poll_cq(c);
    int code = atomic_load_explicit(&c->peer_fail, memory_order_acquire);
    if (!code || code == BRAID_ERR_ABORTED || code == BRAID_ERR_TIMEOUT) return BRAID_SUCCESS;
    return braid_rdma_failure(c); /* the notice's code and text (set_failed kept them) */
}

static void rdma_wake(braid_conn_t *conn)
{
    braid_rdma_wake_fd(((rdma_conn_t *)conn)->wake_fd);
}

static void rdma_fail(braid_conn_t *conn, braid_result_t code, const char *why)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    /* braid_comm_abort calls this from another thread: one notice, whichever comes first. */
    if (c->ids[0] && c->ids[0]->qp && braid_rdma_all_connected(c) &&
        !atomic_exchange(&c->fail_sent, 1)) {
        uint32_t v = (uint32_t)(-code) & 0xff;
        snprintf(c->tx_text, RDMA_TEXT - 1, "%s", why ? why : "");
        uint32_t len = (uint32_t)strlen(c->tx_text);
        struct ibv_sge sge = {
            .addr = (uint64_t)(uintptr_t)c->tx_text, .length = len, .lkey = c->mr->lkey};
        struct ibv_send_wr wr = {.wr_id = RDMA_WR_ID(RDMA_WR_FAIL, 0),
                                 .sg_list = &sge,
                                 .num_sge = len ? 1 : 0,
                                 .opcode = IBV_WR_SEND_WITH_IMM,
                                 .send_flags = IBV_SEND_SIGNALED |
                                               (len <= c->max_inline ? IBV_SEND_INLINE : 0),
                                 .imm_data = htonl(RDMA_CTRL | v)},
                           *bad;
        /* Signaled and counted, so close() lets it leave before the disconnect. */
        if (ibv_post_send(c->ids[0]->qp, &wr, &bad))
            braid_info(NET, "rdma: could not tell %s about the failure", c->desc);
        else
            c->sq_out[0]++;
    }
    rdma_wake(conn);
}

void braid_rdma_recv_revoke(braid_conn_t *conn, braid_result_t code, const char *why)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (!c->exp_entry) return; /* nothing exposed: no write can come */
    /* The notice first (it goes on QP 0 before the error state would flush it), given up to
     * 100 ms to leave: the peer's side learns why and posts nothing more (post_msg). */
    rdma_fail(conn, code, why);
    uint64_t deadline = braid_now_ns() + 100000000ull;
    while (c->sq_out[0] && !atomic_load(&c->failed) && braid_now_ns() < deadline)
        braid_rdma_poll_cq(c);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    for (int q = 0; q < c->nqps; q++)
        if (c->ids[q] && c->ids[q]->qp && ibv_modify_qp(c->ids[q]->qp, &a, IBV_QP_STATE))
            braid_warn(NET, "rdma: cannot move the QP from %s to the error state: %s", c->desc,
                       strerror(errno));
    braid_rdma_set_failed(c, code ? code : BRAID_ERR_REMOTE,
                          "rdma: the connection from %s was closed to writes after collective "
                          "#%u failed on this side",
                          c->desc, c->exp.seq);
}

const braid_transport_t braid_transport_rdma = {
    .size = sizeof(braid_transport_t),
    .name = "rdma",
    .recv_setup = braid_rdma_recv_setup,
    .send_connect = braid_rdma_send_connect,
    .recv_accept = braid_rdma_recv_accept,
    .send_get = rdma_send_get,
    .send_post = rdma_send_post,
    .recv_get = rdma_recv_get,
    .recv_release = rdma_recv_release,
    .progress = NULL,
    .wait = rdma_wait,
    .wake = rdma_wake,
    .fail = rdma_fail,
    .peer_failed = rdma_peer_failed,
    .close = braid_rdma_close,
    .comm_cleanup = braid_rdma_comm_cleanup,
    .mem_register = braid_rdma_mem_register,
    .mem_deregister = braid_rdma_mem_deregister,
    .recv_expose = braid_rdma_recv_expose,
    .recv_revoke = braid_rdma_recv_revoke,
    .send_post_at = braid_rdma_send_post_at,
};
