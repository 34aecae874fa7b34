/* RDMA verbs transport: connection setup (rdma_cm), the listener's event thread, close and
 * cleanup. See rdma.c for the design and the data path. */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "transport/rdma_impl.h"
#include "transport/rdma_pos.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rdma_state_t *g_states;

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

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---- queue pair, buffers ------------------------------------------------------------------- */

/* A receive WR: data writes and credits carry no payload; a fail() text lands in rx_text. */
char *braid_rdma_landing(rdma_conn_t *c, int q, uint32_t idx)
{
    return c->rx_text + ((size_t)q * c->rq_depth + idx) * RDMA_TEXT;
}

int braid_rdma_post_recv(rdma_conn_t *c, int q, uint32_t idx)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)braid_rdma_landing(c, q, idx),
                          .length = RDMA_TEXT - 1,
                          .lkey = c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = RDMA_WR_RECV_ID(q, idx), .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(c->ids[q]->qp, &wr, &bad);
}

int braid_rdma_all_connected(rdma_conn_t *c)
{
    return atomic_load(&c->connected) >= c->nqps;
}

static braid_result_t post_recvs(rdma_conn_t *c, int q, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (braid_rdma_post_recv(c, q, i))
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
    c->sq_max = c->nslots + RDMA_EXTRA_WR;
    /* A sender's QP 0 receives credits (a FIFO-full between its polls), exposures and fail(). */
    c->rq_depth = c->nslots + RDMA_EXTRA_WR + RDMA_MAX_EXPOSED;
    c->buf_len = c->stride * c->nslots + 2 * RDMA_TEXT + (size_t)c->nqps * c->rq_depth * RDMA_TEXT;
    if (c->st && c->st->pd && c->st->pd->context == ctx) {
        c->pd = c->st->pd; /* shared: user registrations are usable on this QP */
    } else {
        c->pd = ibv_alloc_pd(ctx);
        if (!c->pd) return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_alloc_pd: %m");
        c->own_pd = 1;
    }
    c->cc = ibv_create_comp_channel(ctx);
    if (!c->cc || set_nonblock(c->cc->fd))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_create_comp_channel: %m");
    c->cq = ibv_create_cq(ctx, (int)((c->sq_max + c->rq_depth) * (uint32_t)c->nqps), c, c->cc, 0);
    if (!c->cq) return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_create_cq: %m");
    if (posix_memalign((void **)&c->buf, 4096, c->buf_len))
        return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory for %zu bytes of slots",
                               c->buf_len);
    memset(c->buf, 0, c->buf_len);
    c->arrived = calloc(c->nslots, sizeof(*c->arrived));
    if (!c->arrived) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    for (int q = 0; q < c->nqps; q++)
        c->rx_next[q] = braid_rdma_pos_first(q);
    c->tx_text = c->buf + c->stride * c->nslots;
    c->tx_exp = c->tx_text + RDMA_TEXT;
    c->rx_text = c->tx_exp + RDMA_TEXT;
    int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
    c->mr = ibv_reg_mr(c->pd, c->buf, c->buf_len, access);
    if (!c->mr)
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_reg_mr of %zu bytes: %m", c->buf_len);
    return BRAID_SUCCESS;
}

static braid_result_t make_qp(rdma_conn_t *c, struct rdma_cm_id *id, int q)
{
    struct ibv_qp_init_attr a = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .cap = {.max_send_wr = c->sq_max,
                .max_recv_wr = c->rq_depth,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = RDMA_INLINE_WANT},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    if (rdma_create_qp(id, c->pd, &a)) {
        a.cap.max_inline_data = 0;
        if (rdma_create_qp(id, c->pd, &a))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_qp for %s: %m", c->desc);
    }
    c->max_inline = a.cap.max_inline_data;
    c->ids[q] = id;
    return post_recvs(c, q, c->rq_depth);
}

/* ---- rdma_cm events ------------------------------------------------------------------------ */

/* The handshake's MACs (rdma_impl.h, rdma_hello_t): the connector's (listener = 0; its first
 * RDMA_HELLO_MAC bytes go in the hello) or the receiver's proof in the accept (listener = 1).
 * conn_nonce is the receive connection's, to_rank the receiver's rank. */
static void rdma_hello_mac(const uint8_t *secret, const uint8_t *conn_nonce, int32_t to_rank,
                           const rdma_hello_t *h, int listener, uint8_t out[BRAID_SHA256_BYTES])
{
    uint8_t bound[BRAID_NONCE_BYTES + sizeof(int32_t)];
    memcpy(bound, conn_nonce, BRAID_NONCE_BYTES);
    memcpy(bound + BRAID_NONCE_BYTES, &to_rank, sizeof(to_rank));
    braid_auth_mac(secret, BRAID_SECRET_BYTES,
                   listener ? "braid-rdma-listener" : "braid-rdma-connect", bound, sizeof(bound), h,
                   offsetof(rdma_hello_t, mac), out);
}

/* Waits for the next event on ch: its type and status (acked already), and where proof is not
 * NULL the event's private data (the receiver's proof in an ESTABLISHED event) in proof, with
 * *have_p = 1 if it held BRAID_SHA256_BYTES. */
static braid_result_t next_event(rdma_conn_t *c, uint64_t deadline, const char *what,
                                 enum rdma_cm_event_type *type_p, int *status_p, uint8_t *proof,
                                 int *have_p)
{
    struct braid_comm *comm = c->base.comm;
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(c->ch, &ev) == 0) {
            *type_p = ev->event;
            *status_p = ev->status;
            if (proof) {
                *have_p = ev->param.conn.private_data &&
                          ev->param.conn.private_data_len >= BRAID_SHA256_BYTES;
                if (*have_p) memcpy(proof, ev->param.conn.private_data, BRAID_SHA256_BYTES);
            }
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

static braid_result_t expect_event_proof(rdma_conn_t *c, uint64_t deadline, const char *what,
                                         enum rdma_cm_event_type want, uint8_t *proof, int *have_p)
{
    enum rdma_cm_event_type t = RDMA_CM_EVENT_ADDR_ERROR;
    int status = 0;
    BRAID_CHECK(next_event(c, deadline, what, &t, &status, proof, have_p));
    if (t != want || status)
        return braid_set_error(t == RDMA_CM_EVENT_REJECTED ? BRAID_ERR_REMOTE : BRAID_ERR_SYSTEM,
                               "rdma: %s %s: %s (status %d)", what, c->desc, rdma_event_str(t),
                               status);
    return BRAID_SUCCESS;
}

static braid_result_t expect_event(rdma_conn_t *c, uint64_t deadline, const char *what,
                                   enum rdma_cm_event_type want)
{
    return expect_event_proof(c, deadline, what, want, NULL, NULL);
}

/* The receive connection the hello's fields name whose nonce its MAC covers (NULL: none;
 * *named_p: whether any connection matched the fields). */
static rdma_conn_t *find_conn(rdma_state_t *st, const rdma_hello_t *h, int *named_p)
{
    *named_p = 0;
    for (rdma_conn_t *c = st->conns; c; c = c->next) {
        if (c->base.peer != h->rank || c->base.channel != h->channel || h->qp < 0 ||
            h->qp >= c->nqps || h->nqps != c->nqps || c->ids[h->qp])
            continue;
        *named_p = 1;
        uint8_t want[BRAID_SHA256_BYTES];
        rdma_hello_mac(st->comm->boot_addr.secret, c->nonce, st->comm->rank, h, 0, want);
        if (!braid_mac_cmp(want, h->mac, RDMA_HELLO_MAC)) return c;
    }
    return NULL;
}

static void handle_connect_request(rdma_state_t *st, struct rdma_cm_event *ev, int *destroy_p)
{
    struct rdma_cm_id *id = ev->id;
    rdma_hello_t h;
    const char *why = NULL;
    rdma_conn_t *c = NULL;
    int named = 0;
    if (!ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof(h)) {
        why = "no hello";
    } else {
        memcpy(&h, ev->param.conn.private_data, sizeof(h));
        if (h.magic != RDMA_MAGIC || h.version != RDMA_VERSION)
            why = "bad magic or version";
        else if (!(c = find_conn(st, &h, &named)))
            why = named ? "wrong job secret (the MAC of its hello does not match)"
                        : "unexpected rank, channel or QP";
        else if (id->verbs != c->ctx)
            why = "arrived on another device";
    }
    if (!why) {
        if (make_qp(c, id, h.qp) < 0) {
            why = "cannot create the queue pair";
            if (id->qp) rdma_destroy_qp(id);
            c->ids[h.qp] = NULL;
        }
    }
    if (!why) {
        id->context = c;
        uint8_t proof[BRAID_SHA256_BYTES]; /* the receiver proves it knows the secret too */
        rdma_hello_mac(st->comm->boot_addr.secret, c->nonce, st->comm->rank, &h, 1, proof);
        struct rdma_conn_param p = {.private_data = proof,
                                    .private_data_len = sizeof(proof),
                                    .responder_resources = 1,
                                    .initiator_depth = 1,
                                    .rnr_retry_count = 7,
                                    .retry_count = 7};
        if (rdma_accept(id, &p)) {
            braid_rdma_set_failed(c, BRAID_ERR_SYSTEM, "rdma: rdma_accept from %s: %s", c->desc,
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
        struct pollfd p[2] = {{.fd = st->ch->fd, .events = POLLIN},
                              {.fd = st->efd, .events = POLLIN}};
        poll(p, 2, 1000);
        if (p[1].revents) break;
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(st->ch, &ev) == 0) {
            int destroy = 0;
            struct rdma_cm_id *id = ev->id;
            pthread_mutex_lock(&st->mu);
            rdma_conn_t *c = id->context;
            switch (ev->event) {
            case RDMA_CM_EVENT_CONNECT_REQUEST:
                handle_connect_request(st, ev, &destroy);
                break;
            case RDMA_CM_EVENT_ESTABLISHED:
                if (c) atomic_fetch_add(&c->connected, 1);
                if (c) braid_rdma_wake_fd(c->wake_fd);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
            case RDMA_CM_EVENT_DEVICE_REMOVAL:
            case RDMA_CM_EVENT_CONNECT_ERROR:
            case RDMA_CM_EVENT_UNREACHABLE:
            case RDMA_CM_EVENT_REJECTED:
                if (c && c != (void *)st)
                    braid_rdma_set_disconnected(c, "%s disconnected (%s)", c->desc,
                                                rdma_event_str(ev->event));
                break;
            default:
                break;
            }
            pthread_mutex_unlock(&st->mu);
            rdma_ack_cm_event(ev);
            if (destroy) rdma_destroy_id(id);
        }
    }
    return NULL;
}

rdma_state_t *braid_rdma_state_find(struct braid_comm *comm)
{
    pthread_mutex_lock(&g_mu);
    rdma_state_t *st = g_states;
    while (st && st->comm != comm)
        st = st->next;
    pthread_mutex_unlock(&g_mu);
    return st;
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
    char why[600];
    r = braid_rdma_listen_addr(comm, &st->laddr, why, sizeof(why));
    if (r < 0) goto fail;
    if (st->laddr.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&st->laddr)->sin_addr, ip, sizeof(ip));
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&st->laddr)->sin6_addr, ip, sizeof(ip));
    braid_rdma_fork_init();
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
    r = braid_rdma_reg_init(st);
    if (r < 0) goto fail;
    struct sockaddr *bound = rdma_get_local_addr(st->listen);
    memcpy(&st->laddr, bound,
           bound->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    int rc = braid_thread_create_quiet(&st->thread, cm_main, st);
    if (rc) {
        r = braid_set_error(BRAID_ERR_SYSTEM, "rdma: cannot start the cm thread: %s", strerror(rc));
        goto fail;
    }
    st->started = 1;
    braid_info(NET, "rdma: listening on %s port %u, device %s (%s)", ip,
               ntohs(((struct sockaddr_in *)&st->laddr)->sin_port),
               ibv_get_device_name(st->listen->verbs->device), why);
    st->next = g_states;
    g_states = st;
    pthread_mutex_unlock(&g_mu);
    *st_p = st;
    return BRAID_SUCCESS;
fail:
    braid_rdma_reg_free(st);
    if (st->listen) rdma_destroy_id(st->listen);
    if (st->ch) rdma_destroy_event_channel(st->ch);
    if (st->efd >= 0) close(st->efd);
    pthread_mutex_destroy(&st->mu);
    free(st);
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* ---- setup --------------------------------------------------------------------------------- */

static rdma_conn_t *conn_new(struct braid_comm *comm, int peer, int channel, int is_send, int nqps)
{
    rdma_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->nqps = nqps;
    c->base = (braid_conn_t){.ops = &braid_transport_rdma,
                             .comm = comm,
                             .peer = peer,
                             .channel = channel,
                             .slot_size = comm->chunk_bytes,
                             .is_send = is_send};
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    snprintf(c->desc, sizeof(c->desc), "rank %d (host %.60s)", peer, peer_host(comm, peer));
    return c;
}

braid_result_t braid_rdma_recv_setup(struct braid_comm *comm, int peer, int channel,
                                     braid_conn_t **conn_p, void *info, size_t *info_len_p)
{
    if (*info_len_p < RDMA_INFO_BYTES)
        return braid_set_error(BRAID_ERR_INTERNAL, "rdma: info buffer of %zu bytes", *info_len_p);
    int64_t nqps = 1;
    BRAID_CHECK(braid_param_int("IB_QPS_PER_CONN", &nqps));
    if (nqps < 1 || nqps > RDMA_MAX_QPS || (nqps & (nqps - 1)))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_IB_QPS_PER_CONN=%lld is not 1, 2, 4 or 8 (rdma_pos.h)",
                               (long long)nqps);
    rdma_state_t *st = NULL;
    BRAID_CHECK(state_get(comm, &st));
    rdma_conn_t *c = conn_new(comm, peer, channel, 0, (int)nqps);
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    c->st = st;
    braid_result_t rr = braid_boot_random_secret(c->nonce);
    if (rr < 0) {
        braid_rdma_close(&c->base);
        return rr;
    }
    braid_result_t r = make_resources(c, st->listen->verbs, 1);
    if (r < 0) {
        braid_rdma_close(&c->base);
        return r;
    }
    rdma_info_t in = {.magic = RDMA_MAGIC,
                      .nslots = c->nslots,
                      .slot_size = comm->chunk_bytes,
                      .addr = (uint64_t)(uintptr_t)c->buf,
                      .rkey = c->mr->rkey,
                      .family = st->laddr.ss_family,
                      .nqps = (uint32_t)c->nqps};
    memcpy(in.nonce, c->nonce, BRAID_NONCE_BYTES);
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
    uint64_t deadline = braid_now_ns() + braid_timeout_ns(comm->timeout_s);
    c->ch = rdma_create_event_channel();
    if (!c->ch || set_nonblock(c->ch->fd))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_event_channel: %m");
    struct sockaddr_storage src;
    socklen_t sl = sizeof(src);
    struct sockaddr *srcp = NULL;
    if (braid_rdma_hca_chosen()) {
        BRAID_CHECK(braid_rdma_hca_addr(&src));
        if (src.ss_family == dst.ss_family) srcp = (struct sockaddr *)&src;
    } else if (*braid_param_str("SOCKET_IFNAME") && braid_boot_local_addr(&src, &sl) == 0 &&
               src.ss_family == dst.ss_family) {
        ((struct sockaddr_in *)&src)->sin_port = 0;
        srcp = (struct sockaddr *)&src;
    }
    for (int q = 0; q < c->nqps; q++) {
        struct rdma_cm_id *id;
        if (rdma_create_id(c->ch, &id, c, RDMA_PS_TCP))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_create_id: %m");
        c->ids[q] = id; /* the QP is created on it below */
        if (rdma_resolve_addr(id, srcp, (struct sockaddr *)&dst, 5000))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_resolve_addr(%s): %m", c->desc);
        BRAID_CHECK(
            expect_event(c, deadline, "resolving the address of", RDMA_CM_EVENT_ADDR_RESOLVED));
        if (rdma_resolve_route(id, 5000))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_resolve_route(%s): %m", c->desc);
        BRAID_CHECK(
            expect_event(c, deadline, "resolving the route to", RDMA_CM_EVENT_ROUTE_RESOLVED));
        if (q == 0)
            BRAID_CHECK(make_resources(c, id->verbs, 0));
        else if (id->verbs != c->ctx)
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: QP %d to %s resolved to another device",
                                   q, c->desc);
        BRAID_CHECK(make_qp(c, id, q));
        rdma_hello_t h = {.magic = RDMA_MAGIC,
                          .version = RDMA_VERSION,
                          .rank = comm->rank,
                          .channel = c->base.channel,
                          .qp = q,
                          .nqps = c->nqps};
        BRAID_CHECK(braid_boot_random_secret(h.nonce));
        uint8_t mac[BRAID_SHA256_BYTES], proof[BRAID_SHA256_BYTES], want[BRAID_SHA256_BYTES];
        rdma_hello_mac(comm->boot_addr.secret, c->nonce, c->base.peer, &h, 0, mac);
        memcpy(h.mac, mac, RDMA_HELLO_MAC);
        struct rdma_conn_param p = {.private_data = &h,
                                    .private_data_len = sizeof(h),
                                    .responder_resources = 1,
                                    .initiator_depth = 1,
                                    .retry_count = 7,
                                    .rnr_retry_count = 7};
        if (rdma_connect(id, &p))
            return braid_set_error(BRAID_ERR_SYSTEM, "rdma: rdma_connect(%s): %m", c->desc);
        int have = 0;
        BRAID_CHECK(expect_event_proof(c, deadline, "connecting to", RDMA_CM_EVENT_ESTABLISHED,
                                       proof, &have));
        rdma_hello_mac(comm->boot_addr.secret, c->nonce, c->base.peer, &h, 1, want);
        if (!have || braid_mac_cmp(want, proof, BRAID_SHA256_BYTES))
            return braid_set_error(BRAID_ERR_AUTH,
                                   "rdma: the receiver of QP %d at %s did not prove it knows the "
                                   "job secret (%s proof in its accept)",
                                   q, c->desc, have ? "a wrong" : "no");
        atomic_fetch_add(&c->connected, 1);
        if (q == 0) BRAID_CHECK(braid_rdma_check_mtu(c, id));
    }
    if (c->nqps > 1) braid_info(NET, "rdma: %d QPs to %s", c->nqps, c->desc);
    return BRAID_SUCCESS;
}

braid_result_t braid_rdma_send_connect(struct braid_comm *comm, int peer, int channel,
                                       const void *info, size_t info_len, braid_conn_t **conn_p)
{
    rdma_info_t in;
    braid_rdma_fork_init();
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
    if (in.nqps < 1 || in.nqps > RDMA_MAX_QPS || (in.nqps & (in.nqps - 1)))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "rdma: rank %d asks for %u QPs (1, 2, 4 or 8 are possible)", peer,
                               in.nqps);
    rdma_conn_t *c = conn_new(comm, peer, channel, 1, (int)in.nqps);
    if (!c) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory");
    c->st = braid_rdma_state_find(comm); /* its protection domain is shared */
    memcpy(c->nonce, in.nonce, BRAID_NONCE_BYTES);
    c->raddr = in.addr;
    c->rkey = in.rkey;
    braid_result_t r = do_connect(c, &in);
    if (r < 0) {
        braid_rdma_close(&c->base);
        return r;
    }
    *conn_p = &c->base;
    return BRAID_SUCCESS;
}

braid_result_t braid_rdma_recv_accept(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    struct braid_comm *comm = conn->comm;
    uint64_t deadline = braid_now_ns() + braid_timeout_ns(comm->timeout_s);
    while (!braid_rdma_all_connected(c)) {
        BRAID_CHECK(braid_rdma_failure(c));
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

static int sq_busy(rdma_conn_t *c)
{
    for (int q = 0; q < c->nqps; q++)
        if (c->sq_out[q]) return 1;
    return 0;
}

void braid_rdma_close(braid_conn_t *conn)
{
    rdma_conn_t *c = (rdma_conn_t *)conn;
    if (!c) return;
    if (c->st) {
        pthread_mutex_lock(&c->st->mu);
        for (rdma_conn_t **pp = &c->st->conns; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        for (int q = 0; q < c->nqps; q++)
            if (c->ids[q]) c->ids[q]->context = NULL;
        pthread_mutex_unlock(&c->st->mu);
    }
    if (atomic_load(&c->connected)) {
        /* Let posted writes and credits finish before the disconnect. */
        uint64_t deadline = braid_now_ns() + 200000000ull;
        while (sq_busy(c) && !atomic_load(&c->failed) && braid_now_ns() < deadline)
            braid_rdma_poll_cq(c);
        for (int q = 0; q < c->nqps; q++)
            if (c->ids[q] && c->ids[q]->qp) rdma_disconnect(c->ids[q]);
    }
    for (int q = 0; q < c->nqps; q++)
        if (c->ids[q] && c->ids[q]->qp) rdma_destroy_qp(c->ids[q]);
    if (c->ch) {
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(c->ch, &ev) == 0)
            rdma_ack_cm_event(ev);
    }
    for (int q = 0; q < c->nqps; q++)
        if (c->ids[q]) rdma_destroy_id(c->ids[q]);
    if (c->ch) rdma_destroy_event_channel(c->ch);
    braid_rdma_recv_expose(&c->base, 0, NULL, 0); /* gives back a held registration */
    if (c->mr) ibv_dereg_mr(c->mr);
    free(c->buf);
    free(c->arrived);
    if (c->cq) {
        if (c->cq_events) ibv_ack_cq_events(c->cq, c->cq_events);
        ibv_destroy_cq(c->cq);
    }
    if (c->cc) ibv_destroy_comp_channel(c->cc);
    if (c->pd && c->own_pd) ibv_dealloc_pd(c->pd);
    if (c->wake_fd >= 0) close(c->wake_fd);
    free(c);
}

void braid_rdma_comm_cleanup(struct braid_comm *comm)
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
        braid_rdma_wake_fd(st->efd);
        pthread_join(st->thread, NULL);
    }
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(st->ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        int req = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST;
        rdma_ack_cm_event(ev);
        if (req) rdma_destroy_id(id);
    }
    braid_rdma_reg_free(st);
    rdma_destroy_id(st->listen);
    rdma_destroy_event_channel(st->ch);
    close(st->efd);
    pthread_mutex_destroy(&st->mu);
    free(st);
}
