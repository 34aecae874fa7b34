/* TCP transport: the data path's sending side, waits and failures (see tcp.h for the design,
 * tcp_rx.c for the receiving side, tcp_conn.c for setup and the progress thread, tcp_wire.c
 * for the frame format).
 *
 * Sender. The engine fills slot pos % nslots in place and posts it: send_post packs the wire
 * header next to the slot, publishes head (frames posted) and writes whatever the socket
 * takes right away with one sendmsg of header + payload (several frames batched when they
 * queue up). tail counts frames entirely handed to the kernel; a slot is free while
 * pos - tail < nslots. A socket that has frames left over is armed for EPOLLOUT in the
 * progress thread, which finishes them even while the engine waits on a receive (a send is
 * never stuck behind a receive) or runs no collective at all; the engine's progress() and
 * wait() push them too when they get the connection's mutex first. wait(SEND) finally sleeps
 * with futex on `ev`, which the writer bumps when tail moves or the connection fails.
 *
 * Receiver (tcp_rx.c). Only the engine's thread reads data sockets, when it needs the next
 * frame. wait(RECV) finally sleeps in ppoll on the socket of the next frame and the
 * communicator's wake eventfd.
 *
 * Waiting. The engine spins and then yields (BRAID_SPIN_US, BRAID_YIELD_US) calling
 * recv_get / progress, which move data without sleeping; wait() then sleeps until data or the
 * engine's deadline.
 *
 * Failures. EOF or a reset where a frame is expected is BRAID_ERR_REMOTE "rank R (host H,
 * addr) closed the connection"; a malformed header is BRAID_ERR_REMOTE naming the rank and
 * the reason. fail() sends an ABORT frame: on a send connection after the frames already
 * posted, on a receive connection backwards to the sender (whose progress thread watches its
 * sockets for it, and for EOF). Like shm, a failure is reported when the engine needs the
 * connection (a frame to read, a slot that does not come free), so the engine's own checks of
 * the data it already has (a mismatch) come first; after a local abort it is
 * BRAID_ERR_ABORTED. A peer that goes silent is caught by the engine's BRAID_TIMEOUT. */
#include "core/comm.h"
#include "core/log.h"
#include "transport/tcp.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define TX_IOV 64

static inline int before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_for(_Atomic uint32_t *w, uint32_t val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static void bump_ev(tcp_conn_t *c)
{
    atomic_fetch_add_explicit(&c->ev, 1, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->waiters, memory_order_relaxed)) futex_wake_all(&c->ev);
}

static void wake_engine(tcp_state_t *st)
{
    uint64_t one = 1;
    ssize_t n = write(st->wake_efd, &one, sizeof(one));
    (void)n;
}

void braid_tcp_set_failed(tcp_conn_t *c, braid_result_t code, const char *fmt, ...)
{
    if (atomic_load_explicit(&c->failed, memory_order_acquire)) return;
    va_list ap;
    va_start(ap, fmt);
    char full[4096];
    vsnprintf(full, sizeof(full), fmt, ap);
    braid_str_fit(c->fail_msg, sizeof(c->fail_msg), full);
    va_end(ap);
    braid_info(NET, "tcp: %s", c->fail_msg);
    atomic_store_explicit(&c->failed, code, memory_order_release);
    bump_ev(c);
    wake_engine(c->st);
}

braid_result_t braid_tcp_failure(tcp_conn_t *c)
{
    int code = atomic_load_explicit(&c->failed, memory_order_acquire);
    if (!code) return BRAID_SUCCESS;
    /* After a local abort, the peers' answers to it are not the news. */
    if (atomic_load_explicit(&c->base.comm->aborted, memory_order_relaxed))
        return braid_set_error(BRAID_ERR_ABORTED, "communicator %s",
                               braid_comm_abort_reason(c->base.comm));
    return braid_set_error(code, "%s", c->fail_msg);
}

void braid_tcp_sock_unwatch(tcp_sock_t *s)
{
    if (s->in_epoll) epoll_ctl(s->conn->st->ep, EPOLL_CTL_DEL, s->fd, NULL);
    s->in_epoll = 0;
    s->armed = 0;
}

static void sock_arm(tcp_sock_t *s, int want)
{
    if (!s->in_epoll || s->armed == want) return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.ptr = s};
    if (epoll_ctl(s->conn->st->ep, EPOLL_CTL_MOD, s->fd, &ev) == 0) s->armed = want;
}

/* ---- sender ----------------------------------------------------------------------------- */

static size_t frame_size(tcp_conn_t *c, uint32_t f)
{
    if (c->abort_set && f == c->abort_idx) return c->abort_len;
    return BRAID_TCP_HDR_BYTES + c->wbytes[f % c->nslots];
}

/* Consumes n written bytes from socket s's frames. */
static void tx_advance(tcp_conn_t *c, tcp_sock_t *s, size_t n)
{
    while (n) {
        size_t rem = frame_size(c, s->next) - s->off;
        if (n < rem) {
            s->off += n;
            return;
        }
        n -= rem;
        if (c->abort_set && s->next == c->abort_idx) c->abort_done = 1;
        s->next += (uint32_t)c->nsocks;
        s->off = 0;
    }
}

void braid_tcp_peer_aborted(tcp_conn_t *c, int32_t code, const char *text)
{
    /* Before the failure is published (set_failed's release store): whoever sees the
     * connection failed sees this too. */
    if (code != BRAID_TCP_GOODBYE)
        atomic_store_explicit(&c->peer_failed, code ? code : BRAID_ERR_REMOTE,
                              memory_order_release);
    if (code == BRAID_TCP_GOODBYE)
        braid_tcp_set_failed(c, BRAID_ERR_REMOTE,
                             "%.150s destroyed its communicator (braid_comm_destroy) while this "
                             "rank still needed it",
                             c->desc);
    else if (code == BRAID_ERR_MISMATCH)
        braid_tcp_set_failed(c, BRAID_ERR_MISMATCH, "%s", text);
    else
        braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%.150s failed: %s", c->desc,
                             text[0] ? text : "no reason given");
}

static braid_result_t tcp_peer_failed(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    int code = atomic_load_explicit(&c->peer_failed, memory_order_acquire);
    if (!code || code == BRAID_ERR_ABORTED || code == BRAID_ERR_TIMEOUT) return BRAID_SUCCESS;
    return braid_tcp_failure(c);
}

/* A send that failed because the peer closed: the peer may have said why first (an ABORT frame
 * back on socket 0, the only one fail() on its receive side writes to, whichever socket
 * failed here). Looks at it without consuming it (the progress thread owns the reading) and
 * takes its reason; 0 if none. */
static int peek_abort(tcp_conn_t *c)
{
    tcp_sock_t *s = &c->sock[0];
    if (s->fd < 0) return 0;
    uint8_t buf[BRAID_TCP_HDR_BYTES + BRAID_TCP_ABORT_MAX];
    ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    braid_msg_hdr_t h;
    int32_t code = 0;
    if (n < BRAID_TCP_HDR_BYTES || braid_tcp_hdr_parse(buf, (size_t)n, 0, &h, &code) < 0 ||
        !(h.flags & BRAID_MSG_ABORT) || (size_t)n < BRAID_TCP_HDR_BYTES + h.bytes)
        return 0;
    char text[BRAID_TCP_ABORT_MAX + 1];
    memcpy(text, buf + BRAID_TCP_HDR_BYTES, h.bytes);
    text[h.bytes] = '\0';
    braid_tcp_peer_aborted(c, code, text);
    return 1;
}

/* Writes as much of socket s's queued frames as it takes; 1 if it is full. */
static int tx_sock(tcp_conn_t *c, tcp_sock_t *s, uint32_t limit)
{
    for (;;) {
        struct iovec iov[TX_IOV];
        int k = 0;
        size_t total = 0, off = s->off;
        uint32_t f = s->next;
        while (k + 2 <= TX_IOV && before(f, limit)) {
            uint32_t slot = f % c->nslots;
            size_t fb = c->wbytes[slot];
            if (off < BRAID_TCP_HDR_BYTES) {
                iov[k++] = (struct iovec){c->whdr[slot] + off, BRAID_TCP_HDR_BYTES - off};
                total += BRAID_TCP_HDR_BYTES - off;
                off = BRAID_TCP_HDR_BYTES;
            }
            size_t p = off - BRAID_TCP_HDR_BYTES;
            if (fb > p) {
                iov[k++] = (struct iovec){(char *)c->wsrc[slot] + p, fb - p};
                total += fb - p;
            }
            off = 0;
            f += (uint32_t)c->nsocks;
        }
        if (k < TX_IOV && c->abort_set && !c->abort_done && f == c->abort_idx) {
            iov[k++] = (struct iovec){c->abort_frame + off, c->abort_len - off};
            total += c->abort_len - off;
        }
        if (!k) return 0;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        ssize_t n = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            if (errno == EFAULT)
                braid_tcp_set_failed(c, BRAID_ERR_INVALID_ARG,
                                     "sending to %s: a buffer of the collective is not readable "
                                     "(freed during the call?)",
                                     c->desc);
            else if (!peek_abort(c))
                braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%s closed the connection (send: %s)",
                                     c->desc, strerror(errno));
            return -1;
        }
        tx_advance(c, s, (size_t)n);
        if ((size_t)n < total) return 1;
    }
}

void braid_tcp_tx_push(tcp_conn_t *c)
{
    if (c->closed) return;
    uint32_t head = atomic_load_explicit(&c->head, memory_order_acquire);
    uint32_t limit = c->abort_set ? c->abort_idx : head;
    int err = 0;
    for (int i = 0; i < c->nsocks && !err; i++) {
        tcp_sock_t *s = &c->sock[i];
        if (s->fd < 0 || !s->in_epoll) continue;
        int full = tx_sock(c, s, limit);
        if (full < 0) {
            err = 1;
            break;
        }
        int pending =
            before(s->next, limit) || (c->abort_set && !c->abort_done && s->next == c->abort_idx);
        sock_arm(s, pending);
    }
    if (err) {
        for (int i = 0; i < c->nsocks; i++)
            braid_tcp_sock_unwatch(&c->sock[i]);
        return; /* the failure is reported when the engine needs the connection */
    }
    uint32_t done = limit;
    for (int i = 0; i < c->nsocks; i++)
        if (before(c->sock[i].next, done)) done = c->sock[i].next;
    if (done != atomic_load_explicit(&c->tail, memory_order_relaxed)) {
        atomic_store_explicit(&c->tail, done, memory_order_release);
        bump_ev(c);
    }
}

/* The progress thread: bytes (or EOF) on a send socket, where only ABORT frames may come. */
void braid_tcp_rev_read(tcp_sock_t *s)
{
    tcp_conn_t *c = s->conn;
    for (;;) {
        size_t want = BRAID_TCP_HDR_BYTES;
        braid_msg_hdr_t h;
        int32_t code = 0;
        if (s->rev_len >= BRAID_TCP_HDR_BYTES) {
            if (braid_tcp_hdr_parse(s->rev, s->rev_len, 0, &h, &code) < 0 ||
                !(h.flags & BRAID_MSG_ABORT)) {
                braid_tcp_set_failed(c, BRAID_ERR_REMOTE,
                                     "%s sent unexpected data back on its receive socket", c->desc);
                break;
            }
            want += h.bytes;
            if (s->rev_len == want) {
                char text[BRAID_TCP_ABORT_MAX + 1];
                memcpy(text, s->rev + BRAID_TCP_HDR_BYTES, h.bytes);
                text[h.bytes] = '\0';
                braid_tcp_peer_aborted(c, code, text);
                break;
            }
        }
        ssize_t n = recv(s->fd, s->rev + s->rev_len, want - s->rev_len, MSG_DONTWAIT);
        if (n > 0) {
            s->rev_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        /* EOF or reset: an error only if this side still has to send (checked by the engine
         * through the sticky failure, so a peer that finished and closed is fine). Another
         * socket's EOF may come before socket 0's ABORT frame is read: the reason, if there. */
        if (s == &c->sock[0] || !peek_abort(c))
            braid_tcp_set_failed(c, BRAID_ERR_REMOTE, "%s closed the connection", c->desc);
        break;
    }
    for (int i = 0; i < c->nsocks; i++)
        braid_tcp_sock_unwatch(&c->sock[i]);
}

static braid_result_t tcp_send_get(braid_conn_t *conn, void **buf_p)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (c->pos - c->tail_seen >= c->nslots) {
        c->tail_seen = atomic_load_explicit(&c->tail, memory_order_acquire);
        if (c->pos - c->tail_seen >= c->nslots) {
            BRAID_CHECK(braid_tcp_failure(c));
            return BRAID_INPROGRESS;
        }
    }
    *buf_p = c->slots + (size_t)(c->pos % c->nslots) * conn->slot_size;
    return BRAID_SUCCESS;
}

static braid_result_t post(braid_conn_t *conn, const braid_msg_hdr_t *hdr, const void *src)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (hdr->bytes > conn->slot_size || (hdr->flags & BRAID_MSG_ABORT))
        return braid_set_error(BRAID_ERR_INTERNAL, "tcp: posting %u bytes in a %zu-byte slot",
                               hdr->bytes, conn->slot_size);
    uint32_t slot = c->pos % c->nslots;
    braid_tcp_hdr_pack(hdr, 0, c->whdr[slot]);
    c->wbytes[slot] = hdr->bytes;
    c->wsrc[slot] = src ? src : c->slots + (size_t)slot * conn->slot_size;
    c->pos++;
    pthread_mutex_lock(&c->mu);
    atomic_store_explicit(&c->head, c->pos, memory_order_release);
    braid_tcp_tx_push(c);
    pthread_mutex_unlock(&c->mu);
    /* A failure (the peer closed, or told us it failed) is reported when the engine would
     * block on this connection, like shm: until then its own checks (a mismatch seen in the
     * data it receives) come first. */
    return BRAID_SUCCESS;
}

static braid_result_t tcp_send_post(braid_conn_t *conn, const braid_msg_hdr_t *hdr)
{
    return post(conn, hdr, NULL);
}

/* Frames straight from the caller's memory: the kernel copies the payload from there (one
 * copy instead of two); tx_sock reads wsrc, and send_detach ends the loan. */
static braid_result_t tcp_send_post_ref(braid_conn_t *conn, const braid_msg_hdr_t *hdr,
                                        const void *src)
{
    return post(conn, hdr, src);
}

static void tcp_send_detach(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    /* Frames before tail are in the kernel. The copies run without the mutex, so the progress
     * thread keeps serving the other connections: tx_sock only reads the caller's memory, and
     * nobody else writes these slots (the engine posts again only after this). A frame partly
     * written is copied whole (its slot then holds the same bytes) and switched under the
     * mutex. */
    pthread_mutex_lock(&c->mu);
    uint32_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    pthread_mutex_unlock(&c->mu);
    int copied = 0;
    for (uint32_t f = tail; before(f, head); f++) {
        uint32_t slot = f % c->nslots;
        char *own = c->slots + (size_t)slot * conn->slot_size;
        if (c->wsrc[slot] != own) {
            memcpy(own, c->wsrc[slot], c->wbytes[slot]);
            copied = 1;
        }
    }
    if (!copied) return;
    pthread_mutex_lock(&c->mu);
    for (uint32_t f = tail; before(f, head); f++) {
        uint32_t slot = f % c->nslots;
        c->wsrc[slot] = c->slots + (size_t)slot * conn->slot_size;
    }
    pthread_mutex_unlock(&c->mu);
}

static braid_result_t tcp_progress(braid_conn_t *conn);

/* Frames posted and not yet entirely in the kernel; 0 once the connection failed (nothing
 * more goes; the failure is reported where the engine needs the connection). */
static uint32_t tcp_send_inflight(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    tcp_progress(conn);
    if (atomic_load_explicit(&c->failed, memory_order_acquire)) return 0;
    return c->pos - atomic_load_explicit(&c->tail, memory_order_acquire);
}

/* ---- progress, wait, wake, fail ----------------------------------------------------------- */

static braid_result_t tcp_progress(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (!conn->is_send || atomic_load_explicit(&c->failed, memory_order_relaxed))
        return BRAID_SUCCESS;
    if (atomic_load_explicit(&c->tail, memory_order_relaxed) ==
        atomic_load_explicit(&c->head, memory_order_relaxed))
        return BRAID_SUCCESS;
    if (pthread_mutex_trylock(&c->mu)) return BRAID_SUCCESS;
    braid_tcp_tx_push(c);
    pthread_mutex_unlock(&c->mu);
    return BRAID_SUCCESS;
}

/* Whether the slot the engine waits for is there (or the connection failed). */
static int have_slot(tcp_conn_t *c, braid_wait_dir_t dir)
{
    if (dir == BRAID_WAIT_RECV)
        return c->rhead != c->pos ||
               (c->direct && !c->rx_user && c->sock[c->rhead % (uint32_t)c->nsocks].have_hdr);
    return c->pos - atomic_load_explicit(&c->tail, memory_order_acquire) < c->nslots;
}

static int wait_ready(tcp_conn_t *c, braid_wait_dir_t dir)
{
    return atomic_load_explicit(&c->failed, memory_order_acquire) || have_slot(c, dir);
}

/* Moves data for the waiter without sleeping: reads the next frame, or pushes queued
 * frames (when the progress thread does not hold the connection). */
static braid_result_t wait_poke(tcp_conn_t *c, braid_wait_dir_t dir)
{
    if (dir == BRAID_WAIT_RECV) return braid_tcp_rx_pump(c);
    return tcp_progress(&c->base);
}

static braid_result_t wait_recv(tcp_conn_t *c, uint64_t deadline_ns)
{
    uint64_t now = braid_now_ns();
    if (now >= deadline_ns) return BRAID_SUCCESS;
    uint64_t ns = deadline_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    struct pollfd p[2] = {{.fd = c->sock[c->rhead % (uint32_t)c->nsocks].fd, .events = POLLIN},
                          {.fd = c->st->wake_efd, .events = POLLIN}};
    int n = ppoll(p, 2, &ts, NULL);
    if (n > 0 && (p[1].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(c->st->wake_efd, &v, sizeof(v));
        (void)r;
    }
    return BRAID_SUCCESS;
}

static braid_result_t wait_send(tcp_conn_t *c, uint64_t deadline_ns)
{
    uint32_t seen = atomic_load_explicit(&c->ev, memory_order_acquire);
    if (wait_ready(c, BRAID_WAIT_SEND)) return BRAID_SUCCESS;
    uint64_t now = braid_now_ns();
    if (now >= deadline_ns) return BRAID_SUCCESS;
    uint64_t ns = deadline_ns - now;
    if (ns > 100000000ull) ns = 100000000ull;
    atomic_fetch_add_explicit(&c->waiters, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (!wait_ready(c, BRAID_WAIT_SEND)) futex_wait_for(&c->ev, seen, ns);
    atomic_fetch_sub_explicit(&c->waiters, 1, memory_order_relaxed);
    return BRAID_SUCCESS;
}

/* The socket the next frame comes from (receive), or that holds the oldest frame not yet
 * in the kernel (send: the engine pushes on POLLOUT, as the progress thread does). */
static int tcp_wait_fd(braid_conn_t *conn, braid_wait_dir_t dir, struct pollfd *pfd)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (atomic_load_explicit(&c->failed, memory_order_acquire) || c->closed) return 0;
    uint32_t f = dir == BRAID_WAIT_RECV ? c->rhead : atomic_load(&c->tail);
    int fd = c->sock[f % (uint32_t)c->nsocks].fd;
    if (fd < 0) return 0;
    *pfd = (struct pollfd){.fd = fd, .events = dir == BRAID_WAIT_RECV ? POLLIN : POLLOUT};
    return 1;
}

static braid_result_t tcp_wait(braid_conn_t *conn, braid_wait_dir_t dir, uint64_t deadline_ns)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    BRAID_CHECK(wait_poke(c, dir));
    if (!have_slot(c, dir)) {
        BRAID_CHECK(braid_tcp_failure(c));
        if (dir == BRAID_WAIT_RECV)
            BRAID_CHECK(wait_recv(c, deadline_ns));
        else
            BRAID_CHECK(wait_send(c, deadline_ns));
    }
    /* Returns after any event: a wake-up may be an abort the engine must see. */
    return have_slot(c, dir) ? BRAID_SUCCESS : braid_tcp_failure(c);
}

static void tcp_wake(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    bump_ev(c);
    wake_engine(c->st);
}

static void send_abort(tcp_conn_t *c, int32_t code, const char *why);

static void tcp_fail(braid_conn_t *conn, braid_result_t code, const char *why)
{
    send_abort((tcp_conn_t *)conn, code < 0 ? code : BRAID_ERR_REMOTE, why);
}

/* The ABORT frame (code, why): after the frames already posted on a send connection,
 * backwards on a receive connection. Once per connection. */
static void send_abort(tcp_conn_t *c, int32_t code, const char *why)
{
    braid_conn_t *conn = &c->base;
    uint8_t frame[BRAID_TCP_HDR_BYTES + BRAID_TCP_ABORT_MAX];
    char text[BRAID_TCP_ABORT_MAX + 1];
    braid_str_fit(text, sizeof(text), why); /* too long: the start and the innermost cause */
    size_t len = strlen(text);
    braid_msg_hdr_t h = {.bytes = (uint32_t)len, .flags = BRAID_MSG_ABORT, .root = -1};
    braid_tcp_hdr_pack(&h, code, frame);
    memcpy(frame + BRAID_TCP_HDR_BYTES, text, len);
    pthread_mutex_lock(&c->mu);
    if (conn->is_send) {
        if (!c->abort_set && !c->closed) {
            memcpy(c->abort_frame, frame, BRAID_TCP_HDR_BYTES + len);
            c->abort_len = BRAID_TCP_HDR_BYTES + len;
            c->abort_idx = atomic_load_explicit(&c->head, memory_order_relaxed);
            c->abort_set = 1;
            braid_tcp_tx_push(c);
        }
    } else if (!c->abort_set && !c->closed && c->sock[0].fd >= 0) {
        /* Backwards on the receive socket: nothing else is ever written there. */
        c->abort_set = 1;
        ssize_t n =
            send(c->sock[0].fd, frame, BRAID_TCP_HDR_BYTES + len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)n;
    }
    pthread_mutex_unlock(&c->mu);
    tcp_wake(conn);
}

/* Finishes queued frames before the connection closes (the receiver still needs them), up to
 * the communicator's timeout; skipped after braid_comm_abort or when this connection failed.
 * After the communicator failed, only to deliver a queued ABORT frame (behind the frames
 * posted before it), for at most 2 s: without it the peer would see a closed connection
 * instead of the cause (a mismatch this rank found). While the communicator is destroyed its
 * connections share one deadline, set by the first: a destroy takes the timeout at most, not
 * the timeout per connection. */
static void flush_sends(tcp_conn_t *c)
{
    struct braid_comm *comm = c->base.comm;
    double limit_s = comm->timeout_s;
    if (atomic_load(&comm->error) && limit_s > 2.0) limit_s = 2.0;
    uint64_t deadline = braid_now_ns() + braid_timeout_ns(limit_s);
    if (atomic_load(&comm->destroying)) {
        uint64_t first = 0;
        if (!atomic_compare_exchange_strong(&c->st->flush_deadline, &first, deadline))
            deadline = first;
        /* the connections flush one after another: each still gets up to 2 s when one before
         * it used the shared deadline up on a peer that does not read */
        uint64_t floor_ns = braid_now_ns() + (uint64_t)((limit_s < 2.0 ? limit_s : 2.0) * 1e9);
        if (deadline < floor_ns) deadline = floor_ns;
    }
    for (;;) {
        if (atomic_load(&c->failed) || atomic_load(&comm->aborted)) return;
        if (atomic_load(&comm->error) && !c->abort_set) return;
        pthread_mutex_lock(&c->mu);
        braid_tcp_tx_push(c);
        uint32_t head = atomic_load(&c->head);
        /* Nothing goes after an ABORT frame, which goes after every frame posted before it. */
        int done = c->abort_set ? c->abort_done : atomic_load(&c->tail) == head;
        int fd = c->sock[atomic_load(&c->tail) % (uint32_t)c->nsocks].fd;
        pthread_mutex_unlock(&c->mu);
        if (done || fd < 0) return;
        if (braid_now_ns() > deadline) {
            braid_warn(NET, "tcp: closing the connection to %s with %u frame(s) unsent", c->desc,
                       (unsigned)(head - atomic_load(&c->tail)));
            return;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, 100);
    }
}

static void tcp_close(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    if (!c) return;
    struct braid_comm *comm = conn->comm;
    /* A clean braid_comm_destroy says goodbye (after the data on a send connection), so the
     * peer names it instead of a closed connection. */
    int clean = comm && atomic_load(&comm->destroying) && !atomic_load(&comm->aborted) &&
                !atomic_load(&comm->error) && !atomic_load(&c->failed);
    if (clean)
        send_abort(c, BRAID_TCP_GOODBYE,
                   "destroyed its communicator"); /* the peer words it (peer_aborted) */
    if (conn->is_send) flush_sends(c);
    tcp_state_t *st = c->st;
    /* The progress thread holds tlock while it handles events, so after this it never
     * touches the sockets; the memory is freed by comm_cleanup. */
    pthread_mutex_lock(&st->tlock);
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    for (int i = 0; i < c->nsocks; i++) {
        tcp_sock_t *s = &c->sock[i];
        braid_tcp_sock_unwatch(s);
        if (s->fd >= 0) close(s->fd);
        s->fd = -1;
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&st->tlock);
}

/* Defined in tcp_conn.c. */
braid_result_t braid_tcp_recv_setup(struct braid_comm *comm, int peer, int channel,
                                    braid_conn_t **conn_p, void *info, size_t *info_len_p);
braid_result_t braid_tcp_send_connect(struct braid_comm *comm, int peer, int channel,
                                      const void *info, size_t info_len, braid_conn_t **conn_p);
braid_result_t braid_tcp_recv_accept(braid_conn_t *conn);
void braid_tcp_comm_cleanup(struct braid_comm *comm);

const braid_transport_t braid_transport_tcp = {
    .size = sizeof(braid_transport_t),
    .name = "tcp",
    .recv_setup = braid_tcp_recv_setup,
    .send_connect = braid_tcp_send_connect,
    .recv_accept = braid_tcp_recv_accept,
    .send_get = tcp_send_get,
    .send_post = tcp_send_post,
    .recv_get = braid_tcp_recv_get,
    .recv_release = braid_tcp_recv_release,
    .progress = tcp_progress,
    .wait = tcp_wait,
    .wake = tcp_wake,
    .fail = tcp_fail,
    .close = tcp_close,
    .comm_cleanup = braid_tcp_comm_cleanup,
    .send_post_ref = tcp_send_post_ref,
    .send_detach = tcp_send_detach,
    .recv_peek = braid_tcp_recv_peek,
    .recv_into = braid_tcp_recv_into,
    .recv_undirect = braid_tcp_recv_undirect,
    .send_inflight = tcp_send_inflight,
    .wait_fd = tcp_wait_fd,
    .peer_failed = tcp_peer_failed,
};
