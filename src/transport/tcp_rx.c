/* TCP transport: the receiving side of the data path (see tcp.h for the design, tcp.c for the
 * sending side and the waits).
 *
 * Only the engine's thread reads data sockets, when it needs the next frame: recv_get reads
 * the header through a small bounce buffer, copies the bytes already there and reads the rest
 * of the payload straight into the slot (a readv whose second vector is the bounce buffer, so
 * the next header usually comes in the same call). A socket whose last frame fit the bounce
 * buffer (up to 32 KiB of payload) reads as much as that frame into it next time, so a run of
 * such frames takes one recv per frame, not a recv and a readv (all-to-all over TCP at 64 KiB
 * with 4 ranks: 0.92 of the time); larger ones keep an 8 KiB read-ahead and go to the slot or
 * caller's buffer straight from the socket. Direct receives (recv_peek, recv_into: the
 * point-to-point runner) read the payload straight into the caller's buffer instead, once the
 * consumer has checked the header and named the buffer; until then only headers are read
 * ahead. */
#include "core/comm.h"
#include "core/log.h"
#include "transport/tcp.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bytes a read into s's bounce buffer asks for. */
static inline size_t rx_want(const tcp_sock_t *s)
{
    return s->bb_want ? s->bb_want : BRAID_TCP_READAHEAD;
}

/* Receive error on s (n = recv's result): sticky BRAID_ERR_REMOTE. */
static braid_result_t rx_error(tcp_conn_t *c, ssize_t n)
{
    if (n == 0)
        braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%s closed the connection", c->desc);
    else
        braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%s closed the connection (receive: %s)", c->desc,
                             strerror(errno));
    return braid_tcp_failure(c);
}

/* Reads the header of frame c->rhead from its socket s (through the bounce buffer): 1 when
 * it is there, 0 when the socket has no more bytes for now, < 0 on error. */
static braid_result_t rx_hdr(tcp_conn_t *c, tcp_sock_t *s)
{
    if (s->have_hdr) return 1;
    while (s->bb_len - s->bb_off < BRAID_TCP_HDR_BYTES) {
        if (s->bb_off) {
            memmove(s->bb, s->bb + s->bb_off, s->bb_len - s->bb_off);
            s->bb_len -= s->bb_off;
            s->bb_off = 0;
        }
        ssize_t n = recv(s->fd, s->bb + s->bb_len, rx_want(s) - s->bb_len, MSG_DONTWAIT);
        if (n > 0) {
            s->bb_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        return rx_error(c, n);
    }
    if (braid_tcp_hdr_parse(s->bb + s->bb_off, BRAID_TCP_HDR_BYTES, c->base.slot_size, &s->hdr,
                            &s->code) < 0) {
        braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%s sent a malformed frame: %s", c->desc,
                             braid_last_error());
        return braid_tcp_failure(c);
    }
    s->bb_off += BRAID_TCP_HDR_BYTES;
    s->have_hdr = 1;
    s->got = 0;
    return 1;
}

/* Reads frame c->rhead from its socket: 1 when complete, 0 when the socket has no more
 * bytes for now, < 0 on error. The payload goes to the caller's buffer of a direct receive
 * (recv_into) when this is that frame, else to the frame's slot (an ABORT frame's text to
 * rx_text). */
static braid_result_t rx_frame(tcp_conn_t *c, tcp_sock_t *s)
{
    braid_result_t r = rx_hdr(c, s);
    if (r <= 0) return r;
    size_t bytes = s->hdr.bytes;
    char *dst = (s->hdr.flags & BRAID_MSG_ABORT)     ? c->rx_text
                : (c->rx_user && c->rhead == c->pos) ? c->rx_user
                                                     : braid_tcp_slot(c, c->rhead);
    size_t k = s->bb_len - s->bb_off;
    if (k > bytes - s->got) k = bytes - s->got;
    if (k) memcpy(dst + s->got, s->bb + s->bb_off, k);
    s->got += k;
    s->bb_off += k;
    while (s->got < bytes) {
        size_t rem = bytes - s->got;
        struct iovec iov[2] = {{dst + s->got, rem}, {s->bb, rx_want(s)}};
        s->bb_off = s->bb_len = 0;
        ssize_t n = readv(s->fd, iov, 2);
        if (n > 0) {
            if ((size_t)n <= rem) {
                s->got += (size_t)n;
            } else {
                s->got = bytes;
                s->bb_len = (size_t)n - rem;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        return rx_error(c, n);
    }
    s->have_hdr = 0;
    /* the next frame is likely this size: read all of it at once if the bounce holds it */
    bytes += BRAID_TCP_HDR_BYTES;
    s->bb_want = bytes > BRAID_TCP_READAHEAD && bytes <= BRAID_TCP_BOUNCE ? bytes : 0;
    return 1;
}

/* Reads frames into free slots: stops when the socket has nothing, the ring is full, or after
 * one frame when the next one would need another system call. In direct mode (the consumer
 * takes payloads with recv_into) only headers are read ahead: a payload stays in the socket
 * until the consumer names its buffer (empty frames and ABORT frames are read whole). */
braid_result_t braid_tcp_rx_pump(tcp_conn_t *c)
{
    braid_result_t r = BRAID_SUCCESS;
    while (!atomic_load_explicit(&c->failed, memory_order_relaxed) &&
           c->rhead - c->pos < c->nslots) {
        tcp_sock_t *s = &c->sock[c->rhead % (uint32_t)c->nsocks];
        int into_user = c->rx_user && c->rhead == c->pos;
        if (c->direct && !into_user) {
            r = rx_hdr(c, s);
            if (r <= 0) break;
            if (s->hdr.bytes && !(s->hdr.flags & BRAID_MSG_ABORT)) {
                r = 0; /* the payload waits for recv_into */
                break;
            }
        }
        r = rx_frame(c, s);
        if (r <= 0) break;
        if (s->hdr.flags & BRAID_MSG_ABORT) {
            char *text = c->rx_text;
            text[s->hdr.bytes] = '\0';
            braid_tcp_peer_aborted(c, s->code, text);
            break;
        }
        c->rhdr[c->rhead % c->nslots] = s->hdr;
        c->rhead++;
        /* A consumer that takes some payloads with recv_into gets one frame per call here:
         * the next one may be for its own buffer. */
        if (c->direct_seen) break;
        tcp_sock_t *n = &c->sock[c->rhead % (uint32_t)c->nsocks];
        if (n->bb_len - n->bb_off < BRAID_TCP_HDR_BYTES && !n->have_hdr) break;
    }
    /* Frames received before a failure are delivered first (the engine's own checks of
     * them come before the peer's news). */
    if (c->rhead != c->pos) return BRAID_SUCCESS;
    if (r < 0) return r;
    return braid_tcp_failure(c);
}

/* Ends a direct receive: what arrived of the frame in the caller's buffer moves to its slot,
 * the rest of it follows there. */
void braid_tcp_recv_undirect(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    c->direct = 0;
    if (!c->rx_user) return;
    if (c->rhead == c->pos) {
        tcp_sock_t *s = &c->sock[c->rhead % (uint32_t)c->nsocks];
        if (s->have_hdr && s->got) memcpy(braid_tcp_slot(c, c->pos), c->rx_user, s->got);
    } else if (c->rhdr[c->pos % c->nslots].bytes) {
        memcpy(braid_tcp_slot(c, c->pos), c->rx_user, c->rhdr[c->pos % c->nslots].bytes);
    }
    c->rx_user = NULL;
}

braid_result_t braid_tcp_recv_get(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                                  const void **buf_p)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (c->direct) braid_tcp_recv_undirect(conn); /* whole frames in slots from here on */
    if (c->rhead == c->pos) {
        BRAID_CHECK(braid_tcp_rx_pump(c));
        if (c->rhead == c->pos) return BRAID_INPROGRESS;
    }
    uint32_t i = c->pos % c->nslots;
    *hdr_p = &c->rhdr[i];
    *buf_p = c->slots + (size_t)i * conn->slot_size;
    return BRAID_SUCCESS;
}

/* Direct receives (transport.h): the next frame's header as soon as it is read. */
braid_result_t braid_tcp_recv_peek(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    c->direct = 1;
    c->direct_seen = 1;
    if (c->rhead == c->pos) {
        tcp_sock_t *s = &c->sock[c->rhead % (uint32_t)c->nsocks];
        if (!s->have_hdr) {
            if (atomic_load_explicit(&c->failed, memory_order_relaxed)) return braid_tcp_failure(c);
            braid_result_t r = rx_hdr(c, s);
            if (r < 0) return r;
            if (!r) return BRAID_INPROGRESS;
        }
        if (!(s->hdr.flags & BRAID_MSG_ABORT) && s->hdr.bytes) {
            *hdr_p = &s->hdr;
            return BRAID_SUCCESS;
        }
        /* An empty frame or the peer's ABORT frame: read whole (the ABORT is reported). */
        BRAID_CHECK(braid_tcp_rx_pump(c));
        if (c->rhead == c->pos) return BRAID_INPROGRESS;
    }
    *hdr_p = &c->rhdr[c->pos % c->nslots];
    return BRAID_SUCCESS;
}

/* The payload of the frame recv_peek showed goes to dst: straight from the socket, or from
 * its slot when it had arrived whole before. */
braid_result_t braid_tcp_recv_into(braid_conn_t *conn, void *dst)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    c->direct = 1;
    if (c->rhead == c->pos) {
        tcp_sock_t *s = &c->sock[c->rhead % (uint32_t)c->nsocks];
        if (!s->have_hdr || (c->rx_user && c->rx_user != dst))
            return braid_set_error(BRAID_ERR_INTERNAL,
                                   "tcp: recv_into from %s without its frame's header", c->desc);
        if (!c->rx_user) {
            c->rx_user = dst;
            if (s->got) memcpy(dst, braid_tcp_slot(c, c->rhead), s->got);
        }
        BRAID_CHECK(braid_tcp_rx_pump(c));
        if (c->rhead == c->pos) return BRAID_INPROGRESS;
    }
    uint32_t i = c->pos % c->nslots;
    if (c->rx_user) {
        c->rx_user = NULL; /* it is there already */
        c->rx_direct_bytes += c->rhdr[i].bytes;
    } else if (c->rhdr[i].bytes) {
        memcpy(dst, braid_tcp_slot(c, c->pos), c->rhdr[i].bytes);
        c->rx_copied_bytes += c->rhdr[i].bytes;
    }
    c->pos++;
    return BRAID_SUCCESS;
}

void braid_tcp_ring_rx_bytes(struct braid_comm *comm, uint64_t *direct_p, uint64_t *copied_p)
{
    *direct_p = *copied_p = 0;
    for (int ch = 0; ch < comm->nchannels; ch++) {
        braid_conn_t *conn = comm->ring[ch].recv;
        if (!conn || conn->ops != &braid_transport_tcp) continue;
        const tcp_conn_t *c = (const tcp_conn_t *)conn;
        *direct_p += c->rx_direct_bytes;
        *copied_p += c->rx_copied_bytes;
    }
}

braid_result_t braid_tcp_recv_release(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    c->pos++;
    return BRAID_SUCCESS;
}
