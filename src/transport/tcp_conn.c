/* TCP transport: connection setup, the data listener, the per-communicator progress thread,
 * close and cleanup (the data path is in tcp.c, the wire formats in tcp_wire.c).
 *
 * Setup. The first recv_setup of a communicator opens one listener (port 0) on the address
 * BRAID_SOCKET_IFNAME selects, else on a NIC local to the rank's NUMA node when the host has
 * several that reach every other host (braid_comm_data_addr), else on the local address that
 * routes to the bootstrap root (so multi-host jobs listen on the interface they bootstrap
 * over), else on braid_boot_local_addr's choice; IPv4 and IPv6. The info blob carries that address,
 * the number of sockets (BRAID_NSOCKS_PERPEER) and the slot size. send_connect opens the sockets
 * (non-blocking connect bounded by BRAID_TIMEOUT) and sends each a hello with its rank, the
 * channel, the socket index and a MAC keyed by the job secret over them and the receive
 * connection's nonce (braid_tcp_hello_mac in tcp.h: the secret itself never goes on the wire);
 * recv_accept waits until the progress thread has matched them all.
 *
 * The progress thread (started with the state, all signals blocked) sleeps in epoll_wait on:
 * the listener (accepts; a hello must arrive within 10 s; at most pending_cap connections wait
 * for theirs, see expire_pending), hellos
 * (a wrong MAC, garbage or an unexpected rank/channel/socket is closed and logged with a
 * warning; the listener keeps serving), send sockets (EPOLLIN: an ABORT frame or EOF from the
 * receiver; EPOLLOUT, armed only while frames are queued: finish them) and an eventfd (stop).
 * It holds tlock while handling events; close() takes tlock, so memory of closed connections
 * stays valid until comm_cleanup joins the thread and frees everything. */
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "transport/tcp.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HELLO_TIMEOUT_NS 10000000000ull
/* Connections waiting for their hello beyond those the job's own ranks may open at once. */
#define PENDING_MARGIN 64
/* A pending connection younger than this is never dropped to make room: a rank's hello is in
 * the socket by the time its connect returns, so it gets read. */
#define PENDING_MIN_AGE_NS 1000000000ull

static void *progress_main(void *arg);

/* ---- state -------------------------------------------------------------------------------- */

braid_result_t braid_tcp_state_get(struct braid_comm *comm, tcp_state_t **st_p)
{
    if (comm->tcp_state) {
        *st_p = comm->tcp_state;
        return BRAID_SUCCESS;
    }
    int64_t nsocks;
    BRAID_CHECK(braid_param_int("NSOCKS_PERPEER", &nsocks));
    if (nsocks < 1 || nsocks > BRAID_TCP_MAX_SOCKS)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_NSOCKS_PERPEER=%lld is outside [1, %d]", (long long)nsocks,
                               BRAID_TCP_MAX_SOCKS);
    tcp_state_t *st = calloc(1, sizeof(*st));
    if (!st) return braid_set_error(BRAID_ERR_NOMEM, "tcp: out of memory");
    st->comm = comm;
    st->nsocks = (int)nsocks;
    /* Every rank may connect at once (braid_comm_connect_pairs: n - 1 peers to each rank),
     * with up to BRAID_TCP_MAX_SOCKS sockets each (BRAID_P2P_TCP_NSOCKS may exceed
     * BRAID_NSOCKS_PERPEER); strangers get the margin. */
    st->pending_cap = comm->nranks * BRAID_TCP_MAX_SOCKS + PENDING_MARGIN;
    struct rlimit nofile; /* never more than a quarter of the process's descriptors */
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        st->pending_cap > (int)(nofile.rlim_cur / 4))
        st->pending_cap =
            nofile.rlim_cur / 4 > PENDING_MARGIN ? (int)(nofile.rlim_cur / 4) : PENDING_MARGIN;
    st->listen_fd = -1;
    st->tag_listen = TCP_EV_LISTEN;
    st->tag_efd = TCP_EV_EFD;
    pthread_mutex_init(&st->tlock, NULL);
    st->ep = epoll_create1(EPOLL_CLOEXEC);
    st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    st->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &st->tag_efd};
    if (st->ep < 0 || st->efd < 0 || st->wake_efd < 0 ||
        epoll_ctl(st->ep, EPOLL_CTL_ADD, st->efd, &ev) != 0) {
        braid_result_t r = braid_set_error(BRAID_ERR_SYSTEM, "tcp: epoll/eventfd: %m");
        if (st->ep >= 0) close(st->ep);
        if (st->efd >= 0) close(st->efd);
        if (st->wake_efd >= 0) close(st->wake_efd);
        pthread_mutex_destroy(&st->tlock);
        free(st);
        return r;
    }
    int rc = braid_thread_create_quiet(&st->thread, progress_main, st);
    if (rc) {
        close(st->ep);
        close(st->efd);
        close(st->wake_efd);
        pthread_mutex_destroy(&st->tlock);
        free(st);
        return braid_set_error(BRAID_ERR_SYSTEM, "tcp: cannot start the progress thread: %s",
                               strerror(rc));
    }
    st->thread_started = 1;
    comm->tcp_state = st;
    *st_p = st;
    return BRAID_SUCCESS;
}

void braid_tcp_sock_options(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* SO_SNDBUF/SO_RCVBUF stay unset: an explicit size turns the kernel's autotuning off
     * (it grows up to tcp_wmem/tcp_rmem's maximum, 4 and 32 MiB here), and fixed 1 or 4 MiB
     * buffers were not faster on loopback. */
}

braid_result_t braid_tcp_listen(tcp_state_t *st)
{
    struct sockaddr_storage a;
    socklen_t alen;
    char why[300];
    BRAID_CHECK(braid_comm_data_addr(st->comm, &a, &alen, why, sizeof(why)));
    char as[80];
    braid_boot_addr_str(&a, as, sizeof(as));
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return braid_set_error(BRAID_ERR_SYSTEM, "tcp: socket for %s: %m", as);
    if (bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 512) != 0) {
        braid_result_t r = braid_set_error(BRAID_ERR_SYSTEM, "tcp: cannot listen on %s: %m", as);
        close(fd);
        return r;
    }
    st->laddrlen = sizeof(st->laddr);
    getsockname(fd, (struct sockaddr *)&st->laddr, &st->laddrlen);
    /* Under tlock: the progress thread sees the listener's fd with its first event. */
    pthread_mutex_lock(&st->tlock);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &st->tag_listen};
    if (epoll_ctl(st->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        pthread_mutex_unlock(&st->tlock);
        braid_result_t r = braid_set_error(BRAID_ERR_SYSTEM, "tcp: epoll_ctl: %m");
        close(fd);
        return r;
    }
    st->listen_fd = fd;
    st->listen_on = 1;
    pthread_mutex_unlock(&st->tlock);
    braid_boot_addr_str(&st->laddr, as, sizeof(as));
    braid_info(NET, "tcp: rank %d listens on %s (%s)", st->comm->rank, as, why);
    return BRAID_SUCCESS;
}

braid_result_t braid_tcp_listen_addr(struct braid_comm *comm, struct sockaddr_storage *addr_p,
                                     socklen_t *len_p)
{
    tcp_state_t *st = comm ? comm->tcp_state : NULL;
    if (!st || st->listen_fd < 0)
        return braid_set_error(BRAID_ERR_INVALID_USAGE, "tcp: this communicator has no listener");
    *addr_p = st->laddr;
    *len_p = st->laddrlen;
    return BRAID_SUCCESS;
}

void braid_tcp_conn_describe(tcp_conn_t *c, const struct sockaddr_storage *addr)
{
    const char *host = c->base.comm->peers ? c->base.comm->peers[c->base.peer].host : "?";
    size_t hl = strcspn(host, "|");
    char as[80] = "";
    if (addr) braid_boot_addr_str(addr, as, sizeof(as));
    snprintf(c->desc, sizeof(c->desc), "rank %d (host %.*s%s%s)", c->base.peer, (int)hl, host,
             as[0] ? ", " : "", as);
}

/* nonce: a receiver's (set before the progress thread can see the connection), else NULL. */
static braid_result_t conn_new(tcp_state_t *st, int peer, int channel, int is_send, int nsocks,
                               size_t slot, const uint8_t *nonce, tcp_conn_t **c_p)
{
    struct braid_comm *comm = st->comm;
    tcp_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "tcp: out of memory for a connection");
    c->st = st;
    c->nsocks = nsocks;
    if (nonce) memcpy(c->nonce, nonce, BRAID_NONCE_BYTES);
    c->nslots = (uint32_t)comm->nslots;
    c->base = (braid_conn_t){.ops = &braid_transport_tcp,
                             .comm = comm,
                             .peer = peer,
                             .channel = channel,
                             .slot_size = slot,
                             .is_send = is_send};
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < BRAID_TCP_MAX_SOCKS; i++) {
        c->sock[i] =
            (tcp_sock_t){.kind = TCP_EV_SEND, .conn = c, .fd = -1, .idx = i, .next = (uint32_t)i};
    }
    int ok = posix_memalign((void **)&c->slots, 4096, (size_t)c->nslots * slot) == 0;
    if (ok && is_send) {
        c->whdr = calloc(c->nslots, sizeof(*c->whdr));
        c->wbytes = calloc(c->nslots, sizeof(*c->wbytes));
        c->wsrc = calloc(c->nslots, sizeof(*c->wsrc));
        ok = c->whdr && c->wbytes && c->wsrc;
    } else if (ok) {
        c->rhdr = calloc(c->nslots, sizeof(*c->rhdr));
        ok = c->rhdr != NULL;
        for (int i = 0; i < nsocks && ok; i++)
            ok = (c->sock[i].bb = malloc(BRAID_TCP_BOUNCE)) != NULL;
    }
    braid_tcp_conn_describe(c, NULL);
    pthread_mutex_lock(&st->tlock);
    c->next_conn = st->conns;
    st->conns = c;
    pthread_mutex_unlock(&st->tlock);
    if (!ok) {
        c->closed = 1; /* freed by comm_cleanup */
        return braid_set_error(BRAID_ERR_NOMEM, "tcp: out of memory for %u slots of %zu bytes",
                               c->nslots, slot);
    }
    *c_p = c;
    return BRAID_SUCCESS;
}

/* ---- the vtable's setup calls --------------------------------------------------------------- */

braid_result_t braid_tcp_recv_setup(struct braid_comm *comm, int peer, int channel,
                                    braid_conn_t **conn_p, void *info, size_t *info_len_p)
{
    if (*info_len_p < BRAID_TCP_INFO_BYTES)
        return braid_set_error(BRAID_ERR_INTERNAL, "tcp: info buffer of %zu bytes", *info_len_p);
    tcp_state_t *st;
    BRAID_CHECK(braid_tcp_state_get(comm, &st));
    if (st->listen_fd < 0) BRAID_CHECK(braid_tcp_listen(st));
    tcp_conn_t *c;
    size_t slot = comm->tcp_conn_slot ? comm->tcp_conn_slot : comm->chunk_bytes;
    int nsocks = comm->tcp_conn_nsocks ? comm->tcp_conn_nsocks : st->nsocks;
    uint8_t nonce[BRAID_NONCE_BYTES];
    BRAID_CHECK(braid_boot_random_secret(nonce));
    BRAID_CHECK(conn_new(st, peer, channel, 0, nsocks, slot, nonce, &c));
    braid_tcp_info_t in = {
        .addr = st->laddr, .addrlen = st->laddrlen, .nsocks = (uint32_t)nsocks, .slot_size = slot};
    memcpy(in.nonce, c->nonce, BRAID_NONCE_BYTES);
    braid_tcp_info_pack(&in, info);
    *info_len_p = BRAID_TCP_INFO_BYTES;
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

/* Waits until fd is ready for events, the deadline, or an abort. */
static braid_result_t wait_fd(struct braid_comm *comm, int fd, short events, uint64_t deadline,
                              const char *what)
{
    for (;;) {
        if (atomic_load(&comm->aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "tcp: aborted while %s", what);
        uint64_t now = braid_now_ns();
        if (now >= deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT, "tcp: timed out after %.1f s %s",
                                   comm->timeout_s, what);
        uint64_t ms = (deadline - now) / 1000000 + 1;
        struct pollfd p = {.fd = fd, .events = events};
        if (poll(&p, 1, ms > 100 ? 100 : (int)ms) > 0) return BRAID_SUCCESS;
    }
}

static braid_result_t connect_sock(tcp_conn_t *c, const braid_tcp_info_t *in, int idx,
                                   uint64_t deadline)
{
    struct braid_comm *comm = c->base.comm;
    char what[200];
    snprintf(what, sizeof(what), "connecting to %s", c->desc);
    int fd = socket(in->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return braid_set_error(BRAID_ERR_SYSTEM, "tcp: socket: %m");
    c->sock[idx].fd = fd;
    braid_tcp_sock_options(fd);
    if (connect(fd, (const struct sockaddr *)&in->addr, in->addrlen) != 0 && errno != EINPROGRESS)
        return braid_set_error(BRAID_ERR_SYSTEM, "tcp: cannot connect to %s: %m", c->desc);
    BRAID_CHECK(wait_fd(comm, fd, POLLOUT, deadline, what));
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        errno = err;
        return braid_set_error(BRAID_ERR_SYSTEM, "tcp: cannot connect to %s: %m", c->desc);
    }
    braid_tcp_hello_t h = {
        .rank = comm->rank, .channel = c->base.channel, .sock = idx, .nsocks = c->nsocks};
    BRAID_CHECK(braid_boot_random_secret(h.nonce));
    uint8_t buf[BRAID_TCP_HELLO_BYTES];
    braid_tcp_hello_pack(&h, buf);
    braid_tcp_hello_mac(comm->boot_addr.secret, in->nonce, c->base.peer, buf,
                        buf + BRAID_TCP_HELLO_MACED);
    size_t sent = 0;
    while (sent < sizeof(buf)) {
        ssize_t n = send(fd, buf + sent, sizeof(buf) - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            BRAID_CHECK(wait_fd(comm, fd, POLLOUT, deadline, what));
        } else {
            return braid_set_error(BRAID_ERR_REMOTE, "tcp: %s closed the connection at setup",
                                   c->desc);
        }
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_tcp_send_connect(struct braid_comm *comm, int peer, int channel,
                                      const void *info, size_t info_len, braid_conn_t **conn_p)
{
    braid_tcp_info_t in;
    BRAID_CHECK(braid_tcp_info_parse(info, info_len, &in));
    size_t slot = comm->tcp_conn_slot ? comm->tcp_conn_slot : comm->chunk_bytes;
    if (in.slot_size != slot)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "tcp: rank %d uses %llu-byte chunks but rank %d uses %zu "
                               "(BRAID_CHUNK_SIZE and BRAID_P2P_TCP_CHUNK_SIZE must be the "
                               "same on every rank)",
                               peer, (unsigned long long)in.slot_size, comm->rank, slot);
    tcp_state_t *st;
    BRAID_CHECK(braid_tcp_state_get(comm, &st));
    tcp_conn_t *c;
    BRAID_CHECK(conn_new(st, peer, channel, 1, (int)in.nsocks, slot, NULL, &c));
    braid_tcp_conn_describe(c, &in.addr);
    uint64_t deadline = braid_now_ns() + braid_timeout_ns(comm->timeout_s);
    for (int i = 0; i < c->nsocks; i++) {
        braid_result_t r = connect_sock(c, &in, i, deadline);
        if (r < 0) {
            c->base.is_send = 0; /* nothing to flush */
            braid_transport_tcp.close(&c->base);
            return r;
        }
    }
    /* Frames go out only on watched sockets (tx_push skips the others): a socket the progress
     * thread cannot watch fails the connect now, not as a timeout later. */
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nsocks; i++) {
        tcp_sock_t *s = &c->sock[i];
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = s};
        if (epoll_ctl(st->ep, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
            braid_result_t r = braid_set_error(
                BRAID_ERR_SYSTEM,
                "tcp: cannot watch socket %d of the connection to %s: epoll_ctl: %m", i, c->desc);
            pthread_mutex_unlock(&c->mu);
            c->base.is_send = 0; /* nothing to flush */
            braid_transport_tcp.close(&c->base);
            return r;
        }
        s->in_epoll = 1;
    }
    pthread_mutex_unlock(&c->mu);
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

braid_result_t braid_tcp_recv_accept(braid_conn_t *conn)
{
    tcp_conn_t *c = (tcp_conn_t *)conn;
    struct braid_comm *comm = conn->comm;
    uint64_t deadline = braid_now_ns() + braid_timeout_ns(comm->timeout_s);
    for (;;) {
        int got = atomic_load_explicit(&c->nconnected, memory_order_acquire);
        if (got == c->nsocks) return BRAID_SUCCESS;
        if (atomic_load(&comm->aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "tcp: aborted waiting for %s", c->desc);
        uint64_t now = braid_now_ns();
        /* The listener cannot take the peer's connection (out of descriptors) for 0.5 s. */
        int aerr = atomic_load(&c->st->accept_err);
        if (aerr && now - atomic_load(&c->st->accept_err_since) > 500000000ull)
            return braid_set_error(BRAID_ERR_SYSTEM,
                                   "tcp: rank %d cannot accept the connection of %s: accept "
                                   "failed: %s%s",
                                   comm->rank, c->desc, strerror(aerr), braid_errno_hint(aerr));
        if (now >= deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "tcp: %s connected %d of %d socket(s) to rank %d within %.1f s",
                                   c->desc, got, c->nsocks, comm->rank, comm->timeout_s);
        struct timespec ts = {0, 100000000};
        syscall(SYS_futex, (uint32_t *)&c->nconnected, FUTEX_WAIT_PRIVATE, (uint32_t)got, &ts, NULL,
                0);
    }
}

/* ---- the progress thread ------------------------------------------------------------------ */

static void pending_drop(tcp_state_t *st, tcp_pending_t *p, const char *why)
{
    if (why) braid_warn(NET, "tcp: rejected a connection from %s: %s", p->from, why);
    if (p->fd >= 0) {
        epoll_ctl(st->ep, EPOLL_CTL_DEL, p->fd, NULL);
        close(p->fd);
    }
    for (tcp_pending_t **pp = &st->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    st->npending--;
    free(p);
}

/* Watches the listener for connections (on) or not: while accepting fails (EMFILE and the
 * like; the level-triggered event would spin) or pending_cap connections wait for their hello
 * (the rest wait in the kernel's backlog). */
static void listen_watch(tcp_state_t *st, int on)
{
    if (st->listen_on == on) return;
    struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.ptr = &st->tag_listen};
    if (epoll_ctl(st->ep, EPOLL_CTL_MOD, st->listen_fd, &ev) == 0) st->listen_on = on;
}

static void accept_all(tcp_state_t *st)
{
    while (st->npending < st->pending_cap) {
        struct sockaddr_storage a;
        socklen_t al = sizeof(a);
        int fd = accept4(st->listen_fd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of fds or memory: stop watching the listener for a while. */
                braid_warn(NET, "tcp: accept on the data listener failed: %m");
                if (!atomic_load(&st->accept_err))
                    atomic_store(&st->accept_err_since, braid_now_ns());
                atomic_store(&st->accept_err, errno);
                listen_watch(st, 0);
                st->accept_paused_until = braid_now_ns() + 100000000ull;
            }
            return;
        }
        atomic_store(&st->accept_err, 0);
        tcp_pending_t *p = calloc(1, sizeof(*p));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = p};
        if (!p || epoll_ctl(st->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(p);
            continue;
        }
        p->kind = TCP_EV_HELLO;
        p->fd = fd;
        p->since_ns = braid_now_ns();
        p->deadline_ns = p->since_ns + HELLO_TIMEOUT_NS;
        braid_boot_addr_str(&a, p->from, sizeof(p->from));
        p->next = st->pending; /* newest first */
        st->pending = p;
        st->npending++;
    }
    /* Full: expire_pending makes room and watches the listener again. */
    listen_watch(st, 0);
}

/* The receive connection the hello's fields name whose nonce its MAC covers (NULL: none;
 * *named_p: whether any connection matched the fields). */
static tcp_conn_t *find_recv_conn(tcp_state_t *st, const braid_tcp_hello_t *h, const uint8_t *hello,
                                  int *named_p)
{
    *named_p = 0;
    for (tcp_conn_t *c = st->conns; c; c = c->next_conn) {
        if (c->base.is_send || c->closed || c->base.peer != h->rank ||
            c->base.channel != h->channel || c->nsocks != h->nsocks || c->sock[h->sock].fd >= 0)
            continue;
        *named_p = 1;
        uint8_t want[BRAID_SHA256_BYTES];
        braid_tcp_hello_mac(st->comm->boot_addr.secret, c->nonce, st->comm->rank, hello, want);
        if (!braid_mac_cmp(want, h->mac, BRAID_SHA256_BYTES)) return c;
    }
    return NULL;
}

static void hello_read(tcp_state_t *st, tcp_pending_t *p)
{
    ssize_t n = recv(p->fd, p->buf + p->got, sizeof(p->buf) - p->got, MSG_DONTWAIT);
    if (n == 0) {
        pending_drop(st, p, "closed before sending a complete hello");
        return;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        {
            pending_drop(st, p, strerror(errno));
            return;
        }
    }
    p->got += (size_t)n;
    if (p->got < sizeof(p->buf)) return;
    braid_tcp_hello_t h;
    char why[300];
    if (braid_tcp_hello_parse(p->buf, p->got, &h) < 0) {
        snprintf(why, sizeof(why), "not a braid data connection (%s)", braid_last_error());
        {
            pending_drop(st, p, why);
            return;
        }
    }
    int named;
    tcp_conn_t *c = find_recv_conn(st, &h, p->buf, &named);
    if (!c) {
        if (named)
            snprintf(why, sizeof(why),
                     "wrong job secret (the MAC of the hello for socket %d/%d from rank %d, "
                     "channel %d does not match)",
                     h.sock, h.nsocks, h.rank, h.channel);
        else
            snprintf(why, sizeof(why), "unexpected socket %d/%d from rank %d, channel %d", h.sock,
                     h.nsocks, h.rank, h.channel);
        pending_drop(st, p, why);
        return;
    }
    epoll_ctl(st->ep, EPOLL_CTL_DEL, p->fd, NULL);
    braid_tcp_sock_options(p->fd);
    struct sockaddr_storage a;
    socklen_t al = sizeof(a);
    if (getpeername(p->fd, (struct sockaddr *)&a, &al) == 0) braid_tcp_conn_describe(c, &a);
    c->sock[h.sock].fd = p->fd;
    p->fd = -1;
    pending_drop(st, p, NULL);
    atomic_fetch_add_explicit(&c->nconnected, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&c->nconnected, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Drops connections whose hello did not come within 10 s and, while pending_cap of them
 * wait, the oldest ones that have waited PENDING_MIN_AGE_NS: idle strangers can hold neither
 * the listener nor the process's descriptors, and a rank's connection accepted after them
 * gets its hello read. Watches the listener again once there is room. Runs after each batch
 * of events (at least every 100 ms while connections are pending). */
static void expire_pending(tcp_state_t *st)
{
    uint64_t now = braid_now_ns();
    tcp_pending_t *oldest = NULL;
    for (tcp_pending_t *p = st->pending, *nx; p; p = nx) {
        nx = p->next;
        if (now >= p->deadline_ns)
            pending_drop(st, p, "no hello within 10 s");
        else
            oldest = p;
    }
    int dropped = 0;
    while (oldest && st->npending >= st->pending_cap &&
           now - oldest->since_ns >= PENDING_MIN_AGE_NS) {
        tcp_pending_t *o = oldest;
        oldest = NULL;
        for (tcp_pending_t *p = st->pending; p != o; p = p->next)
            oldest = p; /* the one before o: the next oldest */
        pending_drop(st, o, NULL);
        dropped++;
    }
    st->crowd_dropped += dropped;
    if (st->crowd_dropped && now - st->crowd_warned_ns >= HELLO_TIMEOUT_NS) {
        braid_warn(NET,
                   "tcp: closed %d connection(s) to the data listener that sent no hello for 1 s "
                   "while %d others waited for theirs (too many pending)",
                   st->crowd_dropped, st->npending);
        st->crowd_dropped = 0;
        st->crowd_warned_ns = now;
    }
    if (st->npending < st->pending_cap && !st->accept_paused_until) listen_watch(st, 1);
}

static void *progress_main(void *arg)
{
    tcp_state_t *st = arg;
    braid_comm_thread_start(st->comm, "tcp");
    struct epoll_event evs[64];
    int timeout_ms = -1; /* 100 ms while connections wait for a hello or the listener pauses */
    while (!atomic_load(&st->stop)) {
        int n = epoll_wait(st->ep, evs, 64, timeout_ms);
        if (n < 0 && errno != EINTR) {
            braid_warn(NET, "tcp: epoll_wait failed: %m");
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            continue;
        }
        pthread_mutex_lock(&st->tlock);
        for (int i = 0; i < n; i++) {
            int kind = *(int *)evs[i].data.ptr;
            if (kind == TCP_EV_EFD) {
                uint64_t v;
                ssize_t r = read(st->efd, &v, sizeof(v));
                (void)r;
            } else if (kind == TCP_EV_LISTEN) {
                accept_all(st);
            } else if (kind == TCP_EV_HELLO) {
                hello_read(st, evs[i].data.ptr);
            } else if (kind == TCP_EV_SEND) {
                tcp_sock_t *s = evs[i].data.ptr;
                tcp_conn_t *c = s->conn;
                pthread_mutex_lock(&c->mu);
                if (!c->closed && s->in_epoll &&
                    (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)))
                    braid_tcp_rev_read(s);
                if (!c->closed && s->in_epoll && (evs[i].events & EPOLLOUT)) braid_tcp_tx_push(c);
                pthread_mutex_unlock(&c->mu);
            }
        }
        if (st->accept_paused_until && braid_now_ns() >= st->accept_paused_until)
            st->accept_paused_until = 0;
        if (st->listen_fd >= 0) expire_pending(st);
        timeout_ms = st->npending || (st->listen_fd >= 0 && !st->listen_on) ? 100 : -1;
        pthread_mutex_unlock(&st->tlock);
    }
    return NULL;
}

/* ---- cleanup ------------------------------------------------------------------------------- */

void braid_tcp_comm_cleanup(struct braid_comm *comm)
{
    tcp_state_t *st = comm->tcp_state;
    if (!st) return;
    if (st->thread_started) {
        atomic_store(&st->stop, 1);
        uint64_t one = 1;
        ssize_t r = write(st->efd, &one, sizeof(one));
        (void)r;
        pthread_join(st->thread, NULL);
    }
    while (st->pending)
        pending_drop(st, st->pending, NULL);
    for (tcp_conn_t *c = st->conns, *nx; c; c = nx) {
        nx = c->next_conn;
        for (int i = 0; i < BRAID_TCP_MAX_SOCKS; i++) {
            if (c->sock[i].fd >= 0) close(c->sock[i].fd);
            free(c->sock[i].bb);
        }
        free(c->slots);
        free(c->whdr);
        free(c->wbytes);
        free(c->wsrc);
        free(c->rhdr);
        pthread_mutex_destroy(&c->mu);
        free(c);
    }
    if (st->listen_fd >= 0) close(st->listen_fd);
    close(st->ep);
    close(st->efd);
    close(st->wake_efd);
    pthread_mutex_destroy(&st->tlock);
    free(st);
    comm->tcp_state = NULL;
}
