/* RDMA verbs transport (libibverbs + librdmacm): one RC queue pair per connection.
 *
 * Setup. The first recv_setup of a communicator opens an rdma_cm listener (port 0) on the
 * address BRAID_SOCKET_IFNAME selects, else on the local address that routes to the bootstrap
 * root (as tcp does), and starts a thread serving its event channel. Every receive connection
 * registers its staging slots (nslots x (64-byte header + slot_size)) on the listener's device;
 * the info blob carries the listener address, the slots' address and rkey. send_connect
 * resolves the address and route, creates its QP and registered staging slots, and connects
 * with private data {magic, job secret, rank, channel}; the receiver's thread checks the secret
 * (braid_secret_cmp), matches the receive connection, creates its QP and accepts. recv_accept
 * waits for ESTABLISHED.
 *
 * Data path (no syscalls). The engine writes a send slot in place; send_post puts the header
 * in front of the payload and RDMA-WRITEs header + payload WITH IMMEDIATE (immediate = message
 * sequence number) into the same slot of the receiver (inline when it fits). The receiver's
 * completion of that write (a consumed receive WR) tells it the slot is full; recv_release
 * returns a credit: a zero-length SEND WITH IMMEDIATE carrying its release count. Both sides
 * poll their completion queue in send_get/recv_get; wait() arms the CQ's completion channel
 * and sleeps in poll() on it (and a wake eventfd, and the sender's rdma_cm channel).
 *
 * Failures. A failed work completion, a DISCONNECTED (or device) event, or a peer's fail()
 * (a zero-length SEND WITH IMMEDIATE with the top bit set and the error code) make the
 * connection failed: wait() then returns BRAID_ERR_REMOTE naming the peer. Messages that
 * arrived before a failure stay readable. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "transport/rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RDMA_MAGIC 0x62524d41u /* "bRMA" */
#define RDMA_VERSION 1u
#define RDMA_HDR 64u           /* header bytes in front of every slot's payload */
#define RDMA_CTRL 0x80000000u  /* immediate: a failure code, not a sequence number */
#define RDMA_SEQ_MASK 0x7fffffffu
#define RDMA_INFO_BYTES 56
#define RDMA_EXTRA_WR 8
#define RDMA_INLINE_WANT 256

struct rdma_state;

typedef struct rdma_conn {
    braid_conn_t base;
    struct rdma_state *st;
    struct rdma_conn *next; /* receive connections of the state */
    struct rdma_cm_id *id;
    struct rdma_event_channel *ch; /* sender: its own channel */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *buf;
    size_t buf_len, stride;
    uint32_t nslots;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t pos;  /* next slot to post (send) or read (recv) */
    uint32_t head; /* receiver: messages arrived */
    uint32_t tail; /* sender: slots released by the receiver (credits) */
    uint32_t sq_out, sq_max, rq_depth, max_inline;
    unsigned cq_events; /* unacked completion-channel events */
    int wake_fd;
    _Atomic int connected;
    _Atomic int failed; /* braid_result_t, 0 = none */
    char fail_msg[400];
    char desc[160];
} rdma_conn_t;

typedef struct rdma_state {
    struct braid_comm *comm;
    struct rdma_state *next;
    pthread_mutex_t mu;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    struct sockaddr_storage laddr;
    int efd;
    pthread_t thread;
    int started, stop;
    rdma_conn_t *conns;
} rdma_state_t;

/* The private data of a connect request. */
typedef struct {
    uint32_t magic, version;
    uint8_t secret[BRAID_SECRET_BYTES];
    int32_t rank, channel;
} rdma_hello_t;

/* The receiver's info blob. */
typedef struct {
    uint32_t magic, nslots;
    uint64_t slot_size, addr;
    uint32_t rkey;
    uint16_t family, port; /* port in network order */
    uint8_t ip[16];
} rdma_info_t;
_Static_assert(sizeof(rdma_info_t) <= RDMA_INFO_BYTES, "info blob");
_Static_assert(sizeof(braid_msg_hdr_t) <= RDMA_HDR, "header");

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rdma_state_t *g_states;

/* ---- device check -------------------------------------------------------------------------- */

static int g_usable;
static pthread_once_t g_usable_once = PTHREAD_ONCE_INIT;

static void check_usable(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return;
    for (int i = 0; i < n && !g_usable; i++) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) continue;
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) == 0) {
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                    g_usable = 1;
            }
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
}

int braid_rdma_usable(void)
{
    pthread_once(&g_usable_once, check_usable);
    return g_usable;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *peer_host(struct braid_comm *comm, int peer)
{
    return comm->peers ? comm->peers[peer].host : "?";
}

static void describe(rdma_conn_t *c, const struct sockaddr_storage *a)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (a->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, sizeof(ip));
    else if (a->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, ip, sizeof(ip));
    snprintf(c->desc, sizeof(c->desc), "rank %d (host %.60s, %s)", c->base.peer,
             peer_host(c->base.comm, c->base.peer), ip);
}

static void wake_fd_signal(int fd)
{
    uint64_t one = 1;
    if (fd >= 0) {
        ssize_t n = write(fd, &one, sizeof(one));
        (void)n;
    }
}

static void set_failed(rdma_conn_t *c, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_failed(rdma_conn_t *c, braid_result_t code, const char *fmt, ...)
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
    wake_fd_signal(c->wake_fd);
}

static braid_result_t failure(rdma_conn_t *c)
{
    int code = atomic_load_explicit(&c->failed, memory_order_acquire);
    if (!code) return BRAID_SUCCESS;
    if (atomic_load_explicit(&c->base.comm->aborted, memory_order_relaxed))
        return braid_set_error(BRAID_ERR_ABORTED, "communicator aborted by braid_comm_abort");
    return braid_set_error(code, "%s", c->fail_msg);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The address to listen on (port 0), like tcp's choice. */
static braid_result_t listen_addr(struct braid_comm *comm, struct sockaddr_storage *a)
{
    socklen_t len = sizeof(*a);
    if (*braid_param_str("SOCKET_IFNAME")) return braid_boot_local_addr(a, &len);
    const braid_boot_addr_t *root = &comm->boot_addr;
    if (root->addrlen) {
        int fd = socket(root->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage s;
        socklen_t sl = sizeof(s);
        int ok = fd >= 0 && connect(fd, (const struct sockaddr *)&root->addr, root->addrlen) == 0 &&
                 getsockname(fd, (struct sockaddr *)&s, &sl) == 0;
        if (fd >= 0) close(fd);
        if (ok && (s.ss_family == AF_INET || s.ss_family == AF_INET6)) {
            ((struct sockaddr_in *)&s)->sin_port = 0;
            *a = s;
            return BRAID_SUCCESS;
        }
    }
    return braid_boot_local_addr(a, &len);
}

/* ---- queue pair, buffers ------------------------------------------------------------------- */

static braid_result_t post_recvs(rdma_conn_t *c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
        if (ibv_post_recv(c->id->qp, &wr, &bad))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_post_recv to %s: %m", c->desc);
    }
    return BRAID_SUCCESS;
}

/* PD, completion channel, CQ and the registered slots on device ctx. */
static braid_result_t make_resources(rdma_conn_t *c, struct ibv_context *ctx, int remote_write)
{
    struct braid_comm *comm = c->base.comm;
    c->ctx = ctx;
    c->nslots = (uint32_t)comm->nslots;
    c->stride = RDMA_HDR + ((comm->chunk_bytes + 63) & ~(size_t)63);
    c->buf_len = c->stride * c->nslots;
    c->sq_max = c->nslots + RDMA_EXTRA_WR;
    c->rq_depth = c->nslots + RDMA_EXTRA_WR;
    c->pd = ibv_alloc_pd(ctx);
    if (!c->pd) return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_alloc_pd: %m");
    c->cc = ibv_create_comp_channel(ctx);
    if (!c->cc || set_nonblock(c->cc->fd))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_create_comp_channel: %m");
    c->cq = ibv_create_cq(ctx, (int)(c->sq_max + c->rq_depth), c, c->cc, 0);
    if (!c->cq) return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_create_cq: %m");
    if (posix_memalign((void **)&c->buf, 4096, c->buf_len))
        return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory for %zu bytes of slots",
                               c->buf_len);
    memset(c->buf, 0, c->buf_len);
    int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
    c->mr = ibv_reg_mr(c->pd, c->buf, c->buf_len, access);
    if (!c->mr)
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_reg_mr of %zu bytes: %m", c->buf_len);
    return BRAID_SUCCESS;
}

static braid_result_t make_qp(rdma_conn_t *c, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr a = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .cap = {.max_send_wr = c->sq_max, .max_recv_wr = c->rq_depth, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = RDMA_INLINE_WANT},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    if (rdma_create_qp(id, c->pd, &a)) {
        a.cap.max_inline_data = 0;
        if (rdma_create_qp(id, c->pd, &a))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_qp for %s: %m", c->desc);
    }
    c->max_inline = a.cap.max_inline_data;
    c->id = id;
    return post_recvs(c, c->rq_depth);
}

/* ---- completions --------------------------------------------------------------------------- */

static void repost(rdma_conn_t *c)
{
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    if (ibv_post_recv(c->id->qp, &wr, &bad))
        set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot repost a receive to %s (QP error)", c->desc);
}

static void on_ctrl(rdma_conn_t *c, uint32_t imm)
{
    braid_result_t code = -(braid_result_t)(imm & 0xff);
    if (code == BRAID_ERR_MISMATCH)
        set_failed(c, BRAID_ERR_MISMATCH, "%s reported a collective mismatch", c->desc);
    else
        set_failed(c, BRAID_ERR_REMOTE, "%s failed (%s)", c->desc, braid_strerror(code));
}

static void poll_cq(rdma_conn_t *c)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (wc[i].status != IBV_WC_WR_FLUSH_ERR || !atomic_load(&c->failed))
                    set_failed(c, BRAID_ERR_REMOTE,
                               "rdma: work completion to/from %s failed: %s (vendor error %u)",
                               c->desc, ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
                if (!(wc[i].opcode & IBV_WC_RECV) && c->sq_out) c->sq_out--;
                continue;
            }
            if (wc[i].opcode & IBV_WC_RECV) {
                uint32_t imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
                if (imm & RDMA_CTRL) {
                    on_ctrl(c, imm);
                } else if (c->base.is_send) {
                    c->tail += (imm - c->tail) & RDMA_SEQ_MASK;
                } else if (imm != (c->head & RDMA_SEQ_MASK)) {
                    set_failed(c, BRAID_ERR_REMOTE,
                               "rdma: %s sent message %u where %u was expected", c->desc, imm,
                               c->head & RDMA_SEQ_MASK);
                } else {
                    c->head++;
                }
                repost(c);
            } else if (c->sq_out) {
                c->sq_out--;
            }
        }
    }
    if (n < 0) set_failed(c, BRAID_ERR_REMOTE, "rdma: ibv_poll_cq failed on %s", c->desc);
}

/* Makes room for one more work request on the send queue. */
static braid_result_t sq_room(rdma_conn_t *c)
{
    uint64_t deadline = 0;
    while (c->sq_out + 2 >= c->sq_max) { /* two kept for fail() */
        poll_cq(c);
        BRAID_CHECK(failure(c));
        if (!deadline) deadline = braid_now_ns() + (uint64_t)(c->base.comm->timeout_s * 1e9);
        if (braid_now_ns() > deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT, "rdma: send queue to %s stuck", c->desc);
    }
    return BRAID_SUCCESS;
}

/* ---- rdma_cm events ------------------------------------------------------------------------ */

/* Waits for the next event on ch: its type and status (acked already). */
static braid_result_t next_event(rdma_conn_t *c, uint64_t deadline, const char *what,
                                 enum rdma_cm_event_type *type_p, int *status_p)
{
    struct braid_comm *comm = c->base.comm;
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(c->ch, &ev) == 0) {
            *type_p = ev->event;
            *status_p = ev->status;
            rdma_ack_cm_event(ev);
            return BRAID_SUCCESS;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_get_cm_event: %m");
        if (atomic_load(&comm->aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "rdma: aborted while %s %s", what, c->desc);
        uint64_t now = braid_now_ns();
        if (now >= deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT, "rdma: timed out after %.1f s %s %s",
                                   comm->timeout_s, what, c->desc);
        uint64_t ms = (deadline - now) / 1000000 + 1;
        struct pollfd p = {.fd = c->ch->fd, .events = POLLIN};
        poll(&p, 1, ms > 100 ? 100 : (int)ms);
    }
}

static braid_result_t expect_event(rdma_conn_t *c, uint64_t deadline, const char *what,
                                   enum rdma_cm_event_type want)
{
    enum rdma_cm_event_type t = RDMA_CM_EVENT_ADDR_ERROR;
    int status = 0;
    BRAID_CHECK(next_event(c, deadline, what, &t, &status));
    if (t != want || status)
        return braid_set_error(t == RDMA_CM_EVENT_REJECTED ? BRAID_ERR_REMOTE : BRAID_ERR_SYSTEM,
                               "rdma: %s %s: %s (status %d)", what, c->desc, rdma_event_str(t),
                               status);
    return BRAID_SUCCESS;
}

static rdma_conn_t *find_conn(rdma_state_t *st, int rank, int channel)
{
    for (rdma_conn_t *c = st->conns; c; c = c->next)
        if (c->base.peer == rank && c->base.channel == channel && !c->id) return c;
    return NULL;
}

static void handle_connect_request(rdma_state_t *st, struct rdma_cm_event *ev, int *destroy_p)
{
    struct rdma_cm_id *id = ev->id;
    rdma_hello_t h;
    const char *why = NULL;
    rdma_conn_t *c = NULL;
    if (!ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof(h)) {
        why = "no hello";
    } else {
        memcpy(&h, ev->param.conn.private_data, sizeof(h));
        if (h.magic != RDMA_MAGIC || h.version != RDMA_VERSION) why = "bad magic or version";
        else if (braid_secret_cmp(h.secret, st->comm->boot_addr.secret)) why = "wrong job secret";
        else if (!(c = find_conn(st, h.rank, h.channel))) why = "unexpected rank or channel";
        else if (id->verbs != c->ctx) why = "arrived on another device";
    }
    if (!why) {
        if (make_qp(c, id) < 0) {
            why = "cannot create the queue pair";
            if (id->qp) rdma_destroy_qp(id);
            c->id = NULL;
        }
    }
    if (!why) {
        id->context = c;
        struct rdma_conn_param p = {.responder_resources = 1, .initiator_depth = 1,
                                    .rnr_retry_count = 7, .retry_count = 7};
        if (rdma_accept(id, &p)) {
            set_failed(c, BRAID_ERR_SYSTEM, "rdma: rdma_accept from %s: %s", c->desc,
                       strerror(errno));
        }
        return;
    }
    braid_warn(NET, "rdma: rejected a connection request: %s", why);
    rdma_reject(id, NULL, 0);
    *destroy_p = 1;
}

static void *cm_main(void *arg)
{
    rdma_state_t *st = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = st->ch->fd, .events = POLLIN}, {.fd = st->efd, .events = POLLIN}};
        poll(p, 2, 1000);
        if (p[1].revents) break;
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(st->ch, &ev) == 0) {
            int destroy = 0;
            struct rdma_cm_id *id = ev->id;
            pthread_mutex_lock(&st->mu);
            rdma_conn_t *c = id->context;
            switch (ev->event) {
            case RDMA_CM_EVENT_CONNECT_REQUEST: handle_connect_request(st, ev, &destroy); break;
            case RDMA_CM_EVENT_ESTABLISHED:
                if (c) atomic_store(&c->connected, 1);
                if (c) wake_fd_signal(c->wake_fd);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
            case RDMA_CM_EVENT_DEVICE_REMOVAL:
            case RDMA_CM_EVENT_CONNECT_ERROR:
            case RDMA_CM_EVENT_UNREACHABLE:
            case RDMA_CM_EVENT_REJECTED:
                if (c && c != (void *)st)
                    set_failed(c, BRAID_ERR_REMOTE, "%s disconnected (%s)", c->desc,
                               rdma_event_str(ev->event));
                break;
            default: break;
            }
            pthread_mutex_unlock(&st->mu);
            rdma_ack_cm_event(ev);
            if (destroy) rdma_destroy_id(id);
        }
    }
    return NULL;
}

static braid_result_t state_get(struct braid_comm *comm, rdma_state_t **st_p)
{
    pthread_mutex_lock(&g_mu);
    rdma_state_t *st = NULL;
    for (st = g_states; st; st = st->next)
        if (st->comm == comm) break;
    if (st) {
        pthread_mutex_unlock(&g_mu);
        *st_p = st;
        return BRAID_SUCCESS;
    }
    braid_result_t r = BRAID_SUCCESS;
    st = calloc(1, sizeof(*st));
    if (!st) {
        pthread_mutex_unlock(&g_mu);
        return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    }
    st->comm = comm;
    st->efd = -1;
    pthread_mutex_init(&st->mu, NULL);
    char ip[INET6_ADDRSTRLEN] = "?";
    r = listen_addr(comm, &st->laddr);
    if (r < 0) goto fail;
    if (st->laddr.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&st->laddr)->sin_addr, ip, sizeof(ip));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&st->laddr)->sin6_addr, ip, sizeof(ip));
    st->ch = rdma_create_event_channel();
    st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!st->ch || st->efd < 0 || set_nonblock(st->ch->fd) ||
        rdma_create_id(st->ch, &st->listen, st, RDMA_PS_TCP)) {
        r = braid_set_error(BRAID_ERR_SYSTEM, "rdma: cannot create the rdma_cm listener: %m");
        goto fail;
    }
    if (rdma_bind_addr(st->listen, (struct sockaddr *)&st->laddr) || rdma_listen(st->listen, 64)) {
        r = braid_set_error(BRAID_ERR_SYSTEM,
                            "rdma: cannot listen on %s (no RDMA device on that address?): %m", ip);
        goto fail;
    }
    if (!st->listen->verbs) {
        r = braid_set_error(BRAID_ERR_SYSTEM, "rdma: no RDMA device has address %s", ip);
        goto fail;
    }
    struct sockaddr *bound = rdma_get_local_addr(st->listen);
    memcpy(&st->laddr, bound, bound->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                           : sizeof(struct sockaddr_in));
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&st->thread, NULL, cm_main, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        r = braid_set_error(BRAID_ERR_SYSTEM, "rdma: cannot start the cm thread: %s", strerror(rc));
        goto fail;
    }
    st->started = 1;
    braid_info(NET, "rdma: listening on %s port %u, device %s", ip,
               ntohs(((struct sockaddr_in *)&st->laddr)->sin_port),
               ibv_get_device_name(st->listen->verbs->device));
    st->next = g_states;
    g_states = st;
    pthread_mutex_unlock(&g_mu);
    *st_p = st;
    return BRAID_SUCCESS;
fail:
    if (st->listen) rdma_destroy_id(st->listen);
    if (st->ch) rdma_destroy_event_channel(st->ch);
    if (st->efd >= 0) close(st->efd);
    pthread_mutex_destroy(&st->mu);
    free(st);
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* ---- setup --------------------------------------------------------------------------------- */

static rdma_conn_t *conn_new(struct braid_comm *comm, int peer, int channel, int is_send)
{
    rdma_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->base = (braid_conn_t){.ops = &braid_transport_rdma, .comm = comm, .peer = peer,
                             .channel = channel, .slot_size = comm->chunk_bytes,
                             .is_send = is_send};
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    snprintf(c->desc, sizeof(c->desc), "rank %d (host %.60s)", peer, peer_host(comm, peer));
    return c;
}

static void rdma_close(braid_conn_t *conn);

static braid_result_t rdma_recv_setup(struct braid_comm *comm, int peer, int channel,
                                      braid_conn_t **conn_p, void *info, size_t *info_len_p)
{
    if (*info_len_p < RDMA_INFO_BYTES)
        return braid_set_error(BRAID_ERR_INTERNAL, "rdma: info buffer of %zu bytes", *info_len_p);
    rdma_state_t *st = NULL;
    BRAID_CHECK(state_get(comm, &st));
    rdma_conn_t *c = conn_new(comm, peer, channel, 0);
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    c->st = st;
    braid_result_t r = make_resources(c, st->listen->verbs, 1);
    if (r < 0) {
        rdma_close(&c->base);
        return r;
    }
    rdma_info_t in = {.magic = RDMA_MAGIC, .nslots = c->nslots, .slot_size = comm->chunk_bytes,
                      .addr = (uint64_t)(uintptr_t)c->buf, .rkey = c->mr->rkey,
                      .family = st->laddr.ss_family};
    if (st->laddr.ss_family == AF_INET) {
        in.port = ((struct sockaddr_in *)&st->laddr)->sin_port;
        memcpy(in.ip, &((struct sockaddr_in *)&st->laddr)->sin_addr, 4);
    } else {
        in.port = ((struct sockaddr_in6 *)&st->laddr)->sin6_port;
        memcpy(in.ip, &((struct sockaddr_in6 *)&st->laddr)->sin6_addr, 16);
    }
    memset(info, 0, RDMA_INFO_BYTES);
    memcpy(info, &in, sizeof(in));
    *info_len_p = RDMA_INFO_BYTES;
    pthread_mutex_lock(&st->mu);
    c->next = st->conns;
    st->conns = c;
    pthread_mutex_unlock(&st->mu);
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

static braid_result_t do_connect(rdma_conn_t *c, const rdma_info_t *in)
{
    struct braid_comm *comm = c->base.comm;
    struct sockaddr_storage dst = {0};
    if (in->family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&dst;
        s->sin_family = AF_INET;
        s->sin_port = in->port;
        memcpy(&s->sin_addr, in->ip, 4);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&dst;
        s->sin6_family = AF_INET6;
        s->sin6_port = in->port;
        memcpy(&s->sin6_addr, in->ip, 16);
    }
    describe(c, &dst);
    uint64_t deadline = braid_now_ns() + (uint64_t)(comm->timeout_s * 1e9);
    c->ch = rdma_create_event_channel();
    if (!c->ch || set_nonblock(c->ch->fd))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_event_channel: %m");
    struct rdma_cm_id *id;
    if (rdma_create_id(c->ch, &id, c, RDMA_PS_TCP))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_id: %m");
    c->id = id; /* the QP is created on it below */
    struct sockaddr_storage src;
    socklen_t sl = sizeof(src);
    struct sockaddr *srcp = NULL;
    if (*braid_param_str("SOCKET_IFNAME") && braid_boot_local_addr(&src, &sl) == 0 &&
        src.ss_family == dst.ss_family) {
        ((struct sockaddr_in *)&src)->sin_port = 0;
        srcp = (struct sockaddr *)&src;
    }
    if (rdma_resolve_addr(id, srcp, (struct sockaddr *)&dst, 5000))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_resolve_addr(%s): %m", c->desc);
    BRAID_CHECK(expect_event(c, deadline, "resolving the address of", RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(id, 5000))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_resolve_route(%s): %m", c->desc);
    BRAID_CHECK(expect_event(c, deadline, "resolving the route to", RDMA_CM_EVENT_ROUTE_RESOLVED));
    c->id = NULL;
    BRAID_CHECK(make_resources(c, id->verbs, 0));
    braid_result_t r = make_qp(c, id);
    c->id = id;
    BRAID_CHECK(r);
    rdma_hello_t h = {.magic = RDMA_MAGIC, .version = RDMA_VERSION, .rank = comm->rank,
                      .channel = c->base.channel};
    memcpy(h.secret, comm->boot_addr.secret, BRAID_SECRET_BYTES);
    struct rdma_conn_param p = {.private_data = &h, .private_data_len = sizeof(h),
                                .responder_resources = 1, .initiator_depth = 1,
                                .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(id, &p))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_connect(%s): %m", c->desc);
    BRAID_CHECK(expect_event(c, deadline, "connecting to", RDMA_CM_EVENT_ESTABLISHED));
    atomic_store(&c->connected, 1);
    return BRAID_SUCCESS;
}

static braid_result_t rdma_send_connect(struct braid_comm *comm, int peer, int channel,
                                        const void *info, size_t info_len, braid_conn_t **conn_p)
{
    rdma_info_t in;
    if (info_len < sizeof(in))
        return braid_set_error(BRAID_ERR_INTERNAL, "rdma: short connection info from rank %d",
                               peer);
    memcpy(&in, info, sizeof(in));
    if (in.magic != RDMA_MAGIC)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "rdma: rank %d did not set up an RDMA connection (no active "
                               "verbs device there? set BRAID_TRANSPORT the same on every rank)",
                               peer);
    if (in.slot_size != comm->chunk_bytes || in.nslots != (uint32_t)comm->nslots ||
        (in.family != AF_INET && in.family != AF_INET6))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "rdma: rank %d uses %u slots of %llu bytes but rank %d uses %d of "
                               "%zu (BRAID_CHUNK_SIZE/BRAID_NSLOTS must match on every rank)",
                               peer, in.nslots, (unsigned long long)in.slot_size, comm->rank,
                               comm->nslots, comm->chunk_bytes);
    rdma_conn_t *c = conn_new(comm, peer, channel, 1);
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    c->raddr = in.addr;
    c->rkey = in.rkey;
    braid_result_t r = do_connect(c, &in);
    if (r < 0) {
        rdma_close(&c->base);
        return r;
    }
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_recv_accept(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    struct braid_comm *comm = conn->comm;
    uint64_t deadline = braid_now_ns() + (uint64_t)(comm->timeout_s * 1e9);
    while (!atomic_load(&c->connected)) {
        BRAID_CHECK(failure(c));
        if (atomic_load(&comm->aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "rdma: aborted waiting for %s", c->desc);
        uint64_t now = braid_now_ns();
        if (now >= deadline)
            return braid_set_error(BRAID_ERR_TIMEOUT, "rdma: %s did not connect within %.1f s",
                                   c->desc, comm->timeout_s);
        struct pollfd p = {.fd = c->wake_fd, .events = POLLIN};
        poll(&p, 1, 50);
        uint64_t v;
        ssize_t n = read(c->wake_fd, &v, sizeof(v));
        (void)n;
    }
    return BRAID_SUCCESS;
}

/* ---- data path ----------------------------------------------------------------------------- */

static braid_result_t rdma_send_get(braid_conn_t *conn, void **buf_p)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (c->pos - c->tail >= c->nslots) {
        poll_cq(c);
        if (c->pos - c->tail >= c->nslots) return BRAID_INPROGRESS;
    }
    *buf_p = c->buf + (size_t)(c->pos % c->nslots) * c->stride + RDMA_HDR;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_send_post(braid_conn_t *conn, const braid_msg_hdr_t *hdr)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    BRAID_CHECK(sq_room(c));
    size_t off = (size_t)(c->pos % c->nslots) * c->stride;
    memcpy(c->buf + off, hdr, sizeof(*hdr));
    uint32_t len = RDMA_HDR + hdr->bytes;
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(c->buf + off), .length = len,
                          .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = 1,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED | (len <= c->max_inline ? IBV_SEND_INLINE : 0),
        .imm_data = htonl(c->pos & RDMA_SEQ_MASK),
        .wr.rdma = {.remote_addr = c->raddr + off, .rkey = c->rkey},
    }, *bad;
    if (ibv_post_send(c->id->qp, &wr, &bad)) {
        set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot post a write to %s (QP error)", c->desc);
        return failure(c);
    }
    c->sq_out++;
    c->pos++;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_recv_get(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                                    const void **buf_p)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (c->pos == c->head) {
        poll_cq(c);
        if (c->pos == c->head) return BRAID_INPROGRESS;
    }
    char *slot = c->buf + (size_t)(c->pos % c->nslots) * c->stride;
    const braid_msg_hdr_t *h = (const braid_msg_hdr_t *)slot;
    if (h->bytes > c->base.slot_size)
        return braid_set_error(BRAID_ERR_REMOTE, "rdma: %s sent %u bytes in a %zu-byte slot",
                               c->desc, h->bytes, c->base.slot_size);
    *hdr_p = h;
    *buf_p = slot + RDMA_HDR;
    return BRAID_SUCCESS;
}

static braid_result_t rdma_recv_release(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    c->pos++;
    BRAID_CHECK(sq_room(c));
    struct ibv_send_wr wr = {.wr_id = 2,
                             .sg_list = NULL,
                             .num_sge = 0,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                             .imm_data = htonl(c->pos & RDMA_SEQ_MASK)},
                       *bad;
    if (ibv_post_send(c->id->qp, &wr, &bad)) {
        set_failed(c, BRAID_ERR_REMOTE, "rdma: cannot return a credit to %s (QP error)", c->desc);
        return failure(c);
    }
    c->sq_out++;
    return BRAID_SUCCESS;
}

static int ready(rdma_conn_t *c, braid_wait_dir_t dir)
{
    if (dir == BRAID_WAIT_RECV) return c->pos != c->head;
    return c->pos - c->tail < c->nslots;
}

/* Handles the sender's own rdma_cm events (a DISCONNECTED). */
static void sender_events(rdma_conn_t *c)
{
    struct rdma_cm_event *ev;
    while (c->ch && rdma_get_cm_event(c->ch, &ev) == 0) {
        enum rdma_cm_event_type t = ev->event;
        rdma_ack_cm_event(ev);
        if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)
            set_failed(c, BRAID_ERR_REMOTE, "%s disconnected (%s)", c->desc, rdma_event_str(t));
    }
}

static braid_result_t rdma_wait(braid_conn_t *conn, braid_wait_dir_t dir, uint64_t deadline_ns)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    if (conn->is_send) sender_events(c);
    BRAID_CHECK(failure(c));
    uint64_t now = braid_now_ns();
    if (now >= deadline_ns) return BRAID_SUCCESS;
    ibv_req_notify_cq(c->cq, 0);
    poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    uint64_t ms = (deadline_ns - now) / 1000000 + 1;
    struct pollfd p[3] = {{.fd = c->cc->fd, .events = POLLIN},
                          {.fd = c->wake_fd, .events = POLLIN},
                          {.fd = c->ch ? c->ch->fd : -1, .events = POLLIN}};
    poll(p, 3, ms > 50 ? 50 : (int)ms);
    struct ibv_cq *cq;
    void *ctx;
    while (ibv_get_cq_event(c->cc, &cq, &ctx) == 0) c->cq_events++;
    if (c->cq_events >= 64) {
        ibv_ack_cq_events(c->cq, c->cq_events);
        c->cq_events = 0;
    }
    uint64_t v;
    ssize_t n = read(c->wake_fd, &v, sizeof(v));
    (void)n;
    poll_cq(c);
    if (ready(c, dir)) return BRAID_SUCCESS;
    if (conn->is_send) sender_events(c);
    return failure(c);
}

static void rdma_wake(braid_conn_t *conn)
{
    wake_fd_signal(((rdma_conn_t *)conn)->wake_fd);
}

static void rdma_fail(braid_conn_t *conn, braid_result_t code, const char *why)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    (void)why; /* only the code travels */
    if (c->id && c->id->qp && atomic_load(&c->connected)) {
        uint32_t v = (uint32_t)(-code) & 0xff;
        struct ibv_send_wr wr = {.wr_id = 3,
                                 .num_sge = 0,
                                 .opcode = IBV_WR_SEND_WITH_IMM,
                                 .send_flags = IBV_SEND_INLINE,
                                 .imm_data = htonl(RDMA_CTRL | v)},
                           *bad;
        if (ibv_post_send(c->id->qp, &wr, &bad))
            braid_info(NET, "rdma: could not tell %s about the failure", c->desc);
    }
    rdma_wake(conn);
}

static void rdma_close(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (!c) return;
    struct rdma_cm_id *id = c->id;
    if (c->st) {
        pthread_mutex_lock(&c->st->mu);
        for (rdma_conn_t **pp = &c->st->conns; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        if (id) id->context = NULL;
        pthread_mutex_unlock(&c->st->mu);
    }
    if (id) {
        if (atomic_load(&c->connected)) {
            /* Let posted writes and credits finish before the disconnect. */
            uint64_t deadline = braid_now_ns() + 200000000ull;
            while (c->sq_out && !atomic_load(&c->failed) && braid_now_ns() < deadline) poll_cq(c);
            rdma_disconnect(id);
        }
        if (id->qp) rdma_destroy_qp(id);
        if (c->ch) {
            struct rdma_cm_event *ev;
            while (rdma_get_cm_event(c->ch, &ev) == 0) rdma_ack_cm_event(ev);
        }
        rdma_destroy_id(id);
    }
    if (c->ch) rdma_destroy_event_channel(c->ch);
    if (c->mr) ibv_dereg_mr(c->mr);
    free(c->buf);
    if (c->cq) {
        if (c->cq_events) ibv_ack_cq_events(c->cq, c->cq_events);
        ibv_destroy_cq(c->cq);
    }
    if (c->cc) ibv_destroy_comp_channel(c->cc);
    if (c->pd) ibv_dealloc_pd(c->pd);
    if (c->wake_fd >= 0) close(c->wake_fd);
    free(c);
}

static void rdma_comm_cleanup(struct braid_comm *comm)
{
    pthread_mutex_lock(&g_mu);
    rdma_state_t **pp = &g_states, *st = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->comm == comm) {
            st = *pp;
            *pp = st->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    if (!st) return;
    if (st->started) {
        wake_fd_signal(st->efd);
        pthread_join(st->thread, NULL);
    }
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(st->ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        int req = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST;
        rdma_ack_cm_event(ev);
        if (req) rdma_destroy_id(id);
    }
    rdma_destroy_id(st->listen);
    rdma_destroy_event_channel(st->ch);
    close(st->efd);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

const braid_transport_t braid_transport_rdma = {
    .size = sizeof(braid_transport_t),
    .name = "rdma",
    .recv_setup = rdma_recv_setup,
    .send_connect = rdma_send_connect,
    .recv_accept = rdma_recv_accept,
    .send_get = rdma_send_get,
    .send_post = rdma_send_post,
    .recv_get = rdma_recv_get,
    .recv_release = rdma_recv_release,
    .progress = NULL,
    .wait = rdma_wait,
    .wake = rdma_wake,
    .fail = rdma_fail,
    .close = rdma_close,
    .comm_cleanup = rdma_comm_cleanup,
};
