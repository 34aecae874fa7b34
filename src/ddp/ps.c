/* Asynchronous data parallelism with parameter servers, on braid's point-to-point calls (see
 * ddp.h). Messages are bytes (BRAID_UINT8): a 32-byte header, then for a push the gradient
 * shard and for a reply the parameter shard. Per worker and server the sequence is fixed, so
 * the receiver always knows the size of the next message:
 *   worker -> server: PULL, then (PUSH, PULL)*, then DONE (push-sized, no gradient applied);
 *   server -> worker: one REPLY (header with the shard's version + the shard) per PULL.
 * A server keeps at most one receive posted per worker (for the message it expects next) and
 * polls them with braid_test; replies go out with braid_isend from a per-worker buffer. */
#include "ddp_impl.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PS_PULL = 1, PS_PUSH = 2, PS_DONE = 3, PS_REPLY = 4 };
typedef struct {
    uint64_t kind, seq;
    int64_t version;
    uint64_t pad;
} ps_hdr_t;
#define HDR sizeof(ps_hdr_t)

enum { W_EXPECT_PULL, W_DEFERRED, W_EXPECT_PUSH, W_DONE };

typedef struct {
    int state;
    braid_request_t rreq; /* the receive posted for the next message, or NULL */
    braid_request_t sreq; /* the last reply in flight, or NULL */
    unsigned char *rbuf, *sbuf;
    int in_c;      /* read the shard and has not pushed since */
    long read_ver; /* the version it read */
    double since;  /* when the current receive was posted */
    uint64_t seq;
    int fresh; /* its request has not been considered for an answer yet */
} ps_worker_t;

struct braid_ps {
    braid_comm_t comm;
    int rank, nranks, nservers, nworkers, server; /* server: index, or -1 on workers */
    braid_ddp_param_t *params;
    int nparams;
    braid_datatype_t dtype;
    size_t es, total; /* element size, elements in all */
    size_t *lo;       /* shard s = [lo[s], lo[s + 1]) */
    braid_ps_options_t opts;
    double timeout;
    /* server */
    unsigned char *shard;
    long version;
    ps_worker_t *w;
    int *fifo, nfifo;
    /* worker */
    unsigned char **push, **reply, *pullmsg;
    braid_request_t *preq;
    int have_view, done;
    uint64_t seq;
    braid_ps_stats_t st;
    braid_result_t failed;
    char failmsg[1024];
};

static double now(void)
{
    return ddp_now();
}

void braid_ps_options_init(braid_ps_options_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof(*o));
    o->nservers = 1;
    o->staleness = 16;
}

static braid_result_t ps_fail(struct braid_ps *ps, braid_result_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static braid_result_t ps_fail(struct braid_ps *ps, braid_result_t r, const char *fmt, ...)
{
    if (!ps->failed) {
        char what[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        ps->failed = r;
        snprintf(ps->failmsg, sizeof(ps->failmsg), "ps %s rank %d: %s (%s)",
                 ps->server >= 0 ? "server" : "worker", ps->rank, what, braid_strerror(r));
        /* the others must not wait for this rank until their timeouts */
        braid_comm_abort(ps->comm);
    }
    return ddp_set_error(ps->failed, "%s", ps->failmsg);
}

/* Copies the flat range [lo, hi) between the registered buffers (grad or param) and buf. */
static void flat_copy(const struct braid_ps *ps, size_t lo, size_t hi, unsigned char *buf,
                      int to_buf, int grad)
{
    size_t at = 0;
    for (int i = 0; i < ps->nparams && at < hi; i++) {
        size_t c = ps->params[i].count, a = at > lo ? at : lo, b = at + c < hi ? at + c : hi;
        if (a < b) {
            unsigned char *p = (unsigned char *)(grad ? ps->params[i].grad : ps->params[i].param);
            p += (a - at) * ps->es;
            unsigned char *q = buf + (a - lo) * ps->es;
            if (to_buf)
                memcpy(q, p, (b - a) * ps->es);
            else
                memcpy(p, q, (b - a) * ps->es);
        }
        at += c;
    }
}

static size_t shard_bytes(const struct braid_ps *ps, int s)
{
    return (ps->lo[s + 1] - ps->lo[s]) * ps->es;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

void braid_ps_destroy(braid_ps_t ps)
{
    if (!ps) return;
    for (int k = 0; ps->w && k < ps->nworkers; k++) {
        if (ps->w[k].rreq) braid_wait(ps->w[k].rreq);
        if (ps->w[k].sreq) braid_wait(ps->w[k].sreq);
        free(ps->w[k].rbuf);
        free(ps->w[k].sbuf);
    }
    for (int s = 0; s < ps->nservers; s++) {
        if (ps->preq && ps->preq[s]) braid_wait(ps->preq[s]);
        if (ps->push) free(ps->push[s]);
        if (ps->reply) free(ps->reply[s]);
    }
    free(ps->preq);
    free(ps->push);
    free(ps->reply);
    free(ps->pullmsg);
    free(ps->w);
    free(ps->fifo);
    free(ps->shard);
    free(ps->lo);
    free(ps->params);
    free(ps);
}

static braid_result_t check(braid_ps_t *ps_p, braid_comm_t comm, const braid_ddp_param_t *params,
                            int nparams, const braid_ps_options_t *o, int nranks)
{
    if (!ps_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ps_p is NULL");
    if (!comm) return ddp_set_error(BRAID_ERR_INVALID_ARG, "comm is NULL");
    if (!params || nparams <= 0)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "params: %d parameters (must be > 0)", nparams);
    if (o->nservers < 1 || o->nservers >= nranks)
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "opts: nservers %d (1 .. nranks - 1 = %d: at least one worker)",
                             o->nservers, nranks - 1);
    if (o->staleness < 0)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: staleness %d (must be >= 0)",
                             o->staleness);
    if (!o->update) return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: update is NULL");
    size_t total = 0;
    for (int i = 0; i < nparams; i++) {
        const braid_ddp_param_t *p = &params[i];
        if (braid_dtype_size(p->dtype) == 0 || p->dtype != params[0].dtype)
            return ddp_set_error(BRAID_ERR_INVALID_ARG,
                                 "params[%d]: dtype %d (every parameter must have params[0]'s "
                                 "valid dtype)",
                                 i, (int)p->dtype);
        if (!p->count || !p->param || !p->grad)
            return ddp_set_error(BRAID_ERR_INVALID_ARG, "params[%d]: count 0 or param/grad NULL",
                                 i);
        total += p->count;
    }
    if (total < (size_t)o->nservers)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "%zu elements for %d servers", total,
                             o->nservers);
    return BRAID_SUCCESS;
}

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (p) memset(p, 0, n);
    return p;
}

braid_result_t braid_ps_create(braid_ps_t *ps_p, braid_comm_t comm, const braid_ddp_param_t *params,
                               int nparams, const braid_ps_options_t *opts)
{
    braid_ps_options_t o;
    if (opts)
        o = *opts;
    else
        braid_ps_options_init(&o);
    int rank = 0, nranks = 0;
    braid_result_t r;
    if (comm && ((r = braid_comm_rank(comm, &rank)) || (r = braid_comm_size(comm, &nranks))))
        return ddp_set_error(r, "ps create: comm: %s", braid_last_error());
    if ((r = check(ps_p, comm, params, nparams, &o, nranks))) return r;
    struct braid_ps *ps = calloc(1, sizeof(*ps));
    if (!ps) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    ps->comm = comm;
    ps->rank = rank;
    ps->nranks = nranks;
    ps->opts = o;
    ps->nservers = o.nservers;
    ps->nworkers = nranks - o.nservers;
    ps->server = rank >= ps->nworkers ? rank - ps->nworkers : -1;
    ps->nparams = nparams;
    ps->dtype = params[0].dtype;
    ps->es = braid_dtype_size(ps->dtype);
    ps->st.max_staleness = -1;
    braid_comm_get_timeout(comm, &ps->timeout);
    ps->params = malloc((size_t)nparams * sizeof(*params));
    ps->lo = malloc(((size_t)ps->nservers + 1) * sizeof(size_t));
    if (!ps->params || !ps->lo) goto nomem;
    memcpy(ps->params, params, (size_t)nparams * sizeof(*params));
    for (int i = 0; i < nparams; i++)
        ps->total += params[i].count;
    for (int s = 0; s <= ps->nservers; s++)
        ps->lo[s] = ps->total * (size_t)s / (size_t)ps->nservers;
    /* every rank the same list and options, then rank 0's parameters everywhere */
    uint64_t h = 1469598103934665603ull, *all = malloc((size_t)nranks * sizeof(uint64_t));
    if (!all) goto nomem;
    int64_t sig[4] = {nparams, o.nservers, o.staleness, (int64_t)ps->dtype};
    h = fnv(h, sig, sizeof(sig));
    for (int i = 0; i < nparams; i++)
        h = fnv(h, &params[i].count, sizeof(size_t));
    r = braid_allgather(&h, all, 1, BRAID_UINT64, comm);
    for (int k = 0; !r && k < nranks; k++)
        if (all[k] != all[0]) {
            free(all);
            braid_ps_destroy(ps);
            return ddp_set_error(BRAID_ERR_MISMATCH,
                                 "ps create: rank %d registered other parameters (counts, dtype) "
                                 "or options (nservers, staleness) than rank 0",
                                 k);
        }
    free(all);
    for (int i = 0; !r && i < nparams; i++)
        r = braid_broadcast(params[i].param, params[i].param, params[i].count, ps->dtype, 0, comm);
    if (r) {
        braid_ps_destroy(ps);
        return ddp_set_error(r, "ps create: %s", braid_last_error());
    }
    if (ps->server >= 0) {
        size_t sb = shard_bytes(ps, ps->server);
        ps->shard = xalloc(sb);
        ps->w = calloc((size_t)ps->nworkers, sizeof(*ps->w));
        ps->fifo = calloc((size_t)ps->nworkers, sizeof(int));
        if (!ps->shard || !ps->w || !ps->fifo) goto nomem;
        flat_copy(ps, ps->lo[ps->server], ps->lo[ps->server + 1], ps->shard, 1, 0);
        for (int k = 0; k < ps->nworkers; k++) {
            ps->w[k].rbuf = xalloc(HDR + sb);
            ps->w[k].sbuf = xalloc(HDR + sb);
            if (!ps->w[k].rbuf || !ps->w[k].sbuf) goto nomem;
        }
        ps->st.buffer_bytes = sb + (size_t)ps->nworkers * 2 * (HDR + sb);
    } else {
        ps->push = calloc((size_t)ps->nservers, sizeof(void *));
        ps->reply = calloc((size_t)ps->nservers, sizeof(void *));
        ps->preq = calloc((size_t)ps->nservers, sizeof(braid_request_t));
        ps->pullmsg = xalloc(HDR);
        if (!ps->push || !ps->reply || !ps->preq || !ps->pullmsg) goto nomem;
        for (int s = 0; s < ps->nservers; s++) {
            ps->push[s] = xalloc(HDR + shard_bytes(ps, s));
            ps->reply[s] = xalloc(HDR + shard_bytes(ps, s));
            if (!ps->push[s] || !ps->reply[s]) goto nomem;
            ps->st.buffer_bytes += 2 * (HDR + shard_bytes(ps, s));
        }
        ps->st.buffer_bytes += HDR;
    }
    *ps_p = ps;
    return BRAID_SUCCESS;
nomem:
    braid_ps_destroy(ps);
    return ddp_set_error(BRAID_ERR_NOMEM, "ps create: out of memory");
}

int braid_ps_is_server(braid_ps_t ps)
{
    return ps && ps->server >= 0;
}

/* ---- server ---------------------------------------------------------------------------- */

static braid_result_t post_recv(struct braid_ps *ps, int k, size_t bytes)
{
    ps_worker_t *w = &ps->w[k];
    w->since = now();
    braid_result_t r = braid_irecv(w->rbuf, bytes, BRAID_UINT8, k, ps->comm, &w->rreq);
    if (r) return ps_fail(ps, r, "receive from worker rank %d: %s", k, braid_last_error());
    return BRAID_SUCCESS;
}

/* May a request for parameters be answered now? (see ddp.h) */
static int gate_open(const struct braid_ps *ps)
{
    long c = 0, oldest = ps->version;
    for (int k = 0; k < ps->nworkers; k++)
        if (ps->w[k].in_c) {
            c++;
            if (ps->w[k].read_ver < oldest) oldest = ps->w[k].read_ver;
        }
    return (ps->version - oldest) + c <= ps->opts.staleness;
}

static braid_result_t reply(struct braid_ps *ps, int k)
{
    ps_worker_t *w = &ps->w[k];
    if (w->sreq) { /* the previous reply: received long ago (the worker has pulled since) */
        braid_result_t r = braid_wait(w->sreq);
        w->sreq = NULL;
        if (r) return ps_fail(ps, r, "reply to worker rank %d: %s", k, braid_last_error());
    }
    size_t sb = shard_bytes(ps, ps->server);
    ps_hdr_t h = {PS_REPLY, w->seq, ps->version, 0};
    memcpy(w->sbuf, &h, HDR);
    memcpy(w->sbuf + HDR, ps->shard, sb);
    braid_result_t r = braid_isend(w->sbuf, HDR + sb, BRAID_UINT8, k, ps->comm, &w->sreq);
    if (r) return ps_fail(ps, r, "reply to worker rank %d: %s", k, braid_last_error());
    ps->st.sent_bytes += HDR + sb;
    w->in_c = 1;
    w->read_ver = ps->version;
    w->state = W_EXPECT_PUSH;
    return post_recv(ps, k, HDR + sb);
}

static braid_result_t handle(struct braid_ps *ps, int k, int *ndone)
{
    ps_worker_t *w = &ps->w[k];
    ps_hdr_t h;
    memcpy(&h, w->rbuf, HDR);
    size_t sb = shard_bytes(ps, ps->server);
    if (w->state == W_EXPECT_PULL) {
        ps->st.recv_bytes += HDR;
        if (h.kind != PS_PULL)
            return ps_fail(ps, BRAID_ERR_INTERNAL,
                           "worker rank %d sent message kind %llu, "
                           "expected a pull",
                           k, (unsigned long long)h.kind);
        w->seq = h.seq;
        w->state = W_DEFERRED;
        w->fresh = 1;
        ps->fifo[ps->nfifo++] = k;
        return BRAID_SUCCESS;
    }
    ps->st.recv_bytes += HDR + sb;
    if (h.kind == PS_DONE) {
        w->state = W_DONE;
        w->in_c = 0;
        (*ndone)++;
        return BRAID_SUCCESS;
    }
    if (h.kind != PS_PUSH || (long)h.version != w->read_ver)
        return ps_fail(ps, BRAID_ERR_INTERNAL,
                       "worker rank %d sent kind %llu version %lld, expected a push on version "
                       "%ld",
                       k, (unsigned long long)h.kind, (long long)h.version, w->read_ver);
    long stale = ps->version - w->read_ver;
    ps->st.hist[stale < 7 ? stale : 7]++;
    if (stale > ps->st.max_staleness) ps->st.max_staleness = stale;
    ps->st.pushes++;
    braid_result_t r = ps->opts.update(ps->opts.update_state, ps->shard, w->rbuf + HDR,
                                       ps->lo[ps->server], sb / ps->es, ps->version + 1);
    if (r) return ps_fail(ps, r, "update function: %s", braid_ddp_last_error());
    ps->version++;
    w->in_c = 0;
    w->state = W_EXPECT_PULL;
    return post_recv(ps, k, HDR);
}

/* How long worker k may stay silent here. Its silence can include time it spends held by
 * another server's staleness bound: after this server replied (W_EXPECT_PUSH) it still pulls
 * from the servers after this one, and once it pushed (W_EXPECT_PULL) it first pulls from the
 * servers before this one. A worker held there waits for one that has not pushed to that
 * server, whose own silence that server times; timing the held worker with the same bound here
 * would fail the job (naming the wrong rank) when the other's silence was within it, e.g. a
 * held worker's silence is its wait there plus its own step. So in those states the bound is
 * 2 * nservers timeouts (a chain of holds passes each server at most once). The states where
 * nothing can hold it keep the timeout: after the last server's reply the worker is computing,
 * and between its push and its pull at server 0 it does nothing. A dead worker fails the
 * receive whatever the state (braid reports it). */
static double silence_bound(const struct braid_ps *ps, const ps_worker_t *w)
{
    int held_after = w->state == W_EXPECT_PUSH && ps->server < ps->nservers - 1;
    int held_before = w->state == W_EXPECT_PULL && ps->server > 0;
    return held_after || held_before ? 2.0 * ps->nservers * ps->timeout : ps->timeout;
}

braid_result_t braid_ps_serve(braid_ps_t ps)
{
    if (!ps) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ps is NULL");
    if (ps->server < 0) return ddp_set_error(BRAID_ERR_INVALID_USAGE, "serve on a worker rank");
    if (ps->failed) return ddp_set_error(ps->failed, "%s", ps->failmsg);
    braid_result_t r;
    for (int k = 0; k < ps->nworkers; k++)
        if ((r = post_recv(ps, k, HDR))) return r;
    int ndone = 0, idle = 0;
    while (ndone < ps->nworkers) {
        int progress = 0;
        double t = now();
        for (int k = 0; k < ps->nworkers; k++) {
            ps_worker_t *w = &ps->w[k];
            if (!w->rreq) continue;
            int done = 0;
            r = braid_test(w->rreq, &done);
            if (done) w->rreq = NULL;
            if (r) /* braid names the rank that failed (a dead rank fails every receive) */
                return ps_fail(ps, r, "serving (receive posted for worker rank %d): %s", k,
                               braid_last_error());
            if (!done) {
                double bound = silence_bound(ps, w);
                if (t - w->since > bound)
                    return ps_fail(ps, BRAID_ERR_TIMEOUT,
                                   "worker rank %d sent nothing for %.1f s (%s)", k, t - w->since,
                                   bound > ps->timeout ? "the bound for a worker that other "
                                                         "servers may hold: 2 x nservers x the "
                                                         "timeout"
                                                       : "the timeout");
                continue;
            }
            progress = 1;
            if ((r = handle(ps, k, &ndone))) return r;
        }
        /* answer waiting requests in arrival order while the bound allows */
        int served = 0;
        while (served < ps->nfifo && gate_open(ps)) {
            if ((r = reply(ps, ps->fifo[served]))) return r;
            served++;
        }
        for (int q = served; q < ps->nfifo; q++)
            if (ps->w[ps->fifo[q]].fresh) { /* a request the bound holds back: count it once */
                ps->w[ps->fifo[q]].fresh = 0;
                ps->st.deferred++;
            }
        memmove(ps->fifo, ps->fifo + served, (size_t)(ps->nfifo - served) * sizeof(int));
        ps->nfifo -= served;
        if (progress || served) {
            idle = 0;
        } else if (++idle > 64) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    for (int k = 0; k < ps->nworkers; k++)
        if (ps->w[k].sreq) {
            r = braid_wait(ps->w[k].sreq);
            ps->w[k].sreq = NULL;
            if (r) return ps_fail(ps, r, "reply to worker rank %d: %s", k, braid_last_error());
        }
    return BRAID_SUCCESS;
}

/* ---- worker ---------------------------------------------------------------------------- */

static braid_result_t worker_check(const struct braid_ps *ps)
{
    if (!ps) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ps is NULL");
    if (ps->server >= 0)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE, "a server rank cannot push or pull");
    if (ps->failed) return ddp_set_error(ps->failed, "%s", ps->failmsg);
    if (ps->done) return ddp_set_error(BRAID_ERR_INVALID_USAGE, "braid_ps_done was called");
    return BRAID_SUCCESS;
}

static braid_result_t send_pushes(struct braid_ps *ps, uint64_t kind)
{
    for (int s = 0; s < ps->nservers; s++) {
        size_t sb = shard_bytes(ps, s);
        ps_hdr_t h = {kind, ps->seq, 0, 0};
        memcpy(&h.version, ps->reply[s] + offsetof(ps_hdr_t, version), sizeof(h.version));
        memcpy(ps->push[s], &h, HDR);
        if (kind == PS_PUSH) flat_copy(ps, ps->lo[s], ps->lo[s + 1], ps->push[s] + HDR, 1, 1);
        braid_result_t r = braid_isend(ps->push[s], HDR + sb, BRAID_UINT8, ps->nworkers + s,
                                       ps->comm, &ps->preq[s]);
        if (r)
            return ps_fail(ps, r, "push to server rank %d: %s", ps->nworkers + s,
                           braid_last_error());
        ps->st.sent_bytes += HDR + sb;
    }
    return BRAID_SUCCESS;
}

static braid_result_t wait_pushes(struct braid_ps *ps)
{
    for (int s = 0; s < ps->nservers; s++) {
        if (!ps->preq[s]) continue;
        braid_result_t r = braid_wait(ps->preq[s]);
        ps->preq[s] = NULL;
        if (r)
            return ps_fail(ps, r, "push to server rank %d: %s", ps->nworkers + s,
                           braid_last_error());
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_ps_push_pull(braid_ps_t ps)
{
    braid_result_t r = worker_check(ps);
    if (r) return r;
    ps->seq++;
    if (ps->have_view) {
        if ((r = send_pushes(ps, PS_PUSH))) return r;
        ps->st.pushes++;
    }
    double t0 = now();
    for (int s = 0; s < ps->nservers; s++) {
        int srank = ps->nworkers + s;
        ps_hdr_t h = {PS_PULL, ps->seq, 0, 0};
        memcpy(ps->pullmsg, &h, HDR);
        if ((r = braid_send(ps->pullmsg, HDR, BRAID_UINT8, srank, ps->comm)))
            return ps_fail(ps, r, "pull request to server rank %d: %s", srank, braid_last_error());
        size_t sb = shard_bytes(ps, s);
        if ((r = braid_recv(ps->reply[s], HDR + sb, BRAID_UINT8, srank, ps->comm)))
            return ps_fail(ps, r, "parameters from server rank %d: %s", srank, braid_last_error());
        ps->st.sent_bytes += HDR;
        ps->st.recv_bytes += HDR + sb;
        flat_copy(ps, ps->lo[s], ps->lo[s + 1], ps->reply[s] + HDR, 0, 0);
    }
    ps->st.wait_s += now() - t0;
    ps->have_view = 1;
    return wait_pushes(ps);
}

braid_result_t braid_ps_done(braid_ps_t ps)
{
    braid_result_t r = worker_check(ps);
    if (r) return r;
    ps->done = 1;
    if (!ps->have_view) { /* a worker that never pulled still owes its servers a pull */
        ps->seq++;
        for (int s = 0; s < ps->nservers && !r; s++) {
            size_t sb = shard_bytes(ps, s);
            ps_hdr_t h = {PS_PULL, ps->seq, 0, 0};
            memcpy(ps->pullmsg, &h, HDR);
            r = braid_send(ps->pullmsg, HDR, BRAID_UINT8, ps->nworkers + s, ps->comm);
            if (!r) r = braid_recv(ps->reply[s], HDR + sb, BRAID_UINT8, ps->nworkers + s, ps->comm);
        }
        if (r) return ps_fail(ps, r, "done: %s", braid_last_error());
    }
    ps->seq++;
    if ((r = send_pushes(ps, PS_DONE))) return r;
    return wait_pushes(ps);
}

braid_result_t braid_ps_gather(braid_ps_t ps)
{
    if (!ps) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ps is NULL");
    if (ps->failed) return ddp_set_error(ps->failed, "%s", ps->failmsg);
    unsigned char *tmp = xalloc(shard_bytes(ps, 0) + ps->es);
    if (!tmp) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    braid_result_t r = BRAID_SUCCESS;
    for (int s = 0; s < ps->nservers && !r; s++) {
        size_t sb = shard_bytes(ps, s);
        if (ps->server == s) memcpy(tmp, ps->shard, sb);
        r = braid_broadcast(tmp, tmp, sb, BRAID_UINT8, ps->nworkers + s, ps->comm);
        if (!r) flat_copy(ps, ps->lo[s], ps->lo[s + 1], tmp, 0, 0);
    }
    free(tmp);
    if (r) return ps_fail(ps, r, "gather of the final parameters: %s", braid_last_error());
    return BRAID_SUCCESS;
}

braid_result_t braid_ps_stats(braid_ps_t ps, braid_ps_stats_t *st)
{
    if (!ps || !st) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ps or st is NULL");
    *st = ps->st;
    return BRAID_SUCCESS;
}
