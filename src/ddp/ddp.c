/* The DDP layer: creation (assignment, consistency check, broadcast), the per-step protocol
 * (grad_ready launches complete buckets strictly in bucket order; finish waits in that order
 * and copies back), no_sync, the default hook, and error reporting. Uses only braid.h. */
#include "ddp_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_err[1024];

braid_result_t ddp_set_error(braid_result_t res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof(g_err), fmt, ap);
    va_end(ap);
    return res;
}

const char *braid_ddp_last_error(void)
{
    return g_err;
}

double ddp_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void braid_ddp_options_init(braid_ddp_options_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof(*opts));
    opts->bucket_cap_bytes = (size_t)25 << 20;
    opts->first_bucket_bytes = (size_t)1 << 20;
    opts->op = BRAID_AVG;
    opts->broadcast_params = 1;
    opts->staging_buffers = 2;
}

unsigned long long ddp_ring_bytes(const struct braid_ddp *d, size_t bytes, int mult)
{
    return (unsigned long long)bytes * (unsigned long long)mult *
           (unsigned long long)(d->nranks - 1) / (unsigned long long)d->nranks;
}

static braid_result_t default_launch(void *state, const braid_ddp_bucket_t *b,
                                     braid_request_t *req_p)
{
    (void)state;
    return braid_iallreduce(b->data, b->data, b->count, b->dtype, b->op, b->comm, req_p);
}

static const char *pname(const struct braid_ddp *d, int i, char *buf, size_t len)
{
    if (d->params[i].name) return d->params[i].name;
    snprintf(buf, len, "param %d", i);
    return buf;
}

void ddp_abort_peers(braid_comm_t comm, braid_result_t res)
{
    if (res != BRAID_ERR_REMOTE && res != BRAID_ERR_ABORTED) braid_comm_abort(comm);
}

/* Records the first communicator/hook error; the layer is failed from then on, and the
 * communicator aborted if the error started here (ddp_abort_peers). */
static braid_result_t ddp_fail(struct braid_ddp *d, braid_result_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static braid_result_t ddp_fail(struct braid_ddp *d, braid_result_t res, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!d->failed) {
        d->failed = res;
        const char *be = braid_last_error(); /* empty: a hook's own error */
        snprintf(d->failmsg, sizeof(d->failmsg), "ddp rank %d: %s%s%s (%s)", d->rank, what,
                 *be ? ": " : "", be, braid_strerror(res));
        ddp_abort_peers(d->comm, res);
    }
    return ddp_set_error(d->failed, "%s", d->failmsg);
}

static braid_result_t ddp_failed(const struct braid_ddp *d)
{
    return ddp_set_error(d->failed, "%s", d->failmsg);
}

static void bucket_desc(const struct braid_ddp *d, int b, braid_ddp_bucket_t *desc)
{
    const ddp_bucket_t *bk = &d->buckets[b];
    desc->index = b;
    desc->data = bk->data;
    desc->count = bk->count;
    desc->dtype = bk->dtype;
    desc->op = d->opts.op;
    desc->comm = d->comm;
    desc->nparams = bk->nparams;
    desc->params = bk->params;
    desc->param_defs = d->params;
}

/* A hook with next(): bucket b's second stage, at a point of the step that is the same on every
 * rank (just before bucket b + 1 is launched, or in finish): waits for launch()'s request,
 * then next() may start another collective (its request becomes the bucket's). */
static braid_result_t advance(struct braid_ddp *d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    if (!d->hook.next || bk->stage) return BRAID_SUCCESS;
    if (bk->req) {
        braid_result_t r = braid_wait(bk->req);
        bk->req = NULL;
        if (r) return ddp_fail(d, r, "bucket %d all-reduce", b);
    }
    braid_ddp_bucket_t desc;
    bucket_desc(d, b, &desc);
    braid_request_t req = NULL;
    braid_result_t r = d->hook.next(d->hook.state, &desc, &req);
    bk->stage = 1;
    if (r) return ddp_fail(d, r, "bucket %d next hook", b);
    bk->req = req;
    return BRAID_SUCCESS;
}

/* Starts every bucket that is complete and whose predecessors have all been started. */
static braid_result_t launch_ready(struct braid_ddp *d)
{
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        int b = d->next_launch;
        ddp_bucket_t *bk = &d->buckets[b];
        if (b > 0) {
            braid_result_t r = advance(d, b - 1);
            if (r) return r;
        }
        braid_ddp_bucket_t desc;
        bucket_desc(d, b, &desc);
        braid_request_t req = NULL;
        bk->t_launch = ddp_now();
        bk->t_done = 0;
        braid_result_t r;
        size_t es = braid_dtype_size(bk->dtype);
        if (d->opts.zero_stage) {
            void *recv = d->opts.zero_stage == 2
                             ? bk->sgrad
                             : (char *)bk->data + (size_t)d->rank * bk->shard * es;
            r = braid_ireduce_scatter(bk->data, recv, bk->shard, bk->dtype, d->opts.op, d->comm,
                                      &req);
            d->sent_bytes += ddp_ring_bytes(d, bk->padded * es, 1);
        } else {
            r = d->hook.launch(d->hook.state, &desc, &req);
            if (d->default_hook) d->sent_bytes += ddp_ring_bytes(d, bk->bytes, 2);
        }
        if (r)
            return ddp_fail(d, r, "bucket %d (%zu x %s) launch", b, bk->count,
                            braid_dtype_name(bk->dtype));
        bk->req = req;
        bk->launched = 1;
        d->next_launch++;
    }
    return BRAID_SUCCESS;
}

/* Completion of bucket b (its request finished): timing and the hook's complete(). */
static braid_result_t bucket_completed(struct braid_ddp *d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    bk->req = NULL;
    bk->done = 1;
    if (bk->t_done == 0) bk->t_done = ddp_now(); /* a hook that left no request */
    d->next_done = b + 1;
    if (d->opts.zero_stage == 2) ddp_zero2_release(d, b);
    if (d->hook.complete) {
        braid_ddp_bucket_t desc;
        bucket_desc(d, b, &desc);
        braid_result_t r = d->hook.complete(d->hook.state, &desc);
        if (r) return ddp_fail(d, r, "bucket %d complete hook", b);
    }
    return BRAID_SUCCESS;
}

/* Non-blocking: notes the buckets that have completed (in order; they complete in order).
 * A hook's next() waits for its fixed point (advance), and without next() its complete() is
 * left to finish (both may run collectives: their order must not depend on when each rank
 * happened to observe a completion). */
static braid_result_t poll_done(struct braid_ddp *d)
{
    for (int b = d->next_done; b < d->next_launch; b++) {
        ddp_bucket_t *bk = &d->buckets[b];
        int last = !d->hook.next || bk->stage; /* no further collective for this bucket */
        if (bk->req) {
            int done = 0;
            double t = 0;
            braid_result_t r = braid_test_time(bk->req, &done, &t);
            if (done) {
                bk->req = NULL; /* freed by braid_test_time */
                if (last) bk->t_done = t;
            }
            if (r) return ddp_fail(d, r, "bucket %d all-reduce", b);
            if (!done) break;
        }
        if (!last) break;
        if (d->hook.complete && !d->hook.next) continue;
        braid_result_t r = bucket_completed(d, b);
        if (r) return r;
    }
    return BRAID_SUCCESS;
}

braid_result_t ddp_wait_next(struct braid_ddp *d)
{
    int b = d->next_done;
    if (b >= d->next_launch) /* nothing in flight: a caller's bug, never walk past it */
        return ddp_set_error(BRAID_ERR_INTERNAL, "ddp: waiting for bucket %d, not launched", b);
    ddp_bucket_t *bk = &d->buckets[b];
    braid_result_t ra = advance(d, b); /* in finish (in bucket order), or zero2 (no hook) */
    if (ra) return ra;
    if (bk->req) {
        braid_result_t r = braid_wait_time(bk->req, &bk->t_done);
        bk->req = NULL;
        if (r) return ddp_fail(d, r, "bucket %d all-reduce", b);
    }
    return bucket_completed(d, b);
}

static braid_result_t wait_launched(struct braid_ddp *d)
{
    while (d->next_done < d->next_launch) {
        braid_result_t r = ddp_wait_next(d);
        if (r) return r;
    }
    return BRAID_SUCCESS;
}

static void reset_step(struct braid_ddp *d)
{
    memset(d->ready, 0, (size_t)d->nparams * sizeof(int));
    for (int b = 0; b < d->nbuckets; b++) {
        d->buckets[b].pending = d->buckets[b].nparams;
        d->buckets[b].launched = d->buckets[b].done = d->buckets[b].stage = 0;
    }
    d->next_launch = d->next_done = d->nready = 0;
}

static void *bucket_slot(const struct braid_ddp *d, int i)
{
    const ddp_bucket_t *bk = &d->buckets[d->pbucket[i]];
    return (char *)bk->data + d->poff[i] * braid_dtype_size(bk->dtype);
}

static size_t param_bytes(const struct braid_ddp *d, int i)
{
    return d->params[i].count * braid_dtype_size(d->params[i].dtype);
}

static braid_result_t check_args(braid_ddp_t *ddp_p, braid_comm_t comm,
                                 const braid_ddp_param_t *params, int nparams,
                                 const braid_ddp_options_t *o)
{
    if (!ddp_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp_p is NULL");
    if (!comm) return ddp_set_error(BRAID_ERR_INVALID_ARG, "comm is NULL");
    if (nparams <= 0)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "nparams is %d (must be > 0)", nparams);
    if (!params) return ddp_set_error(BRAID_ERR_INVALID_ARG, "params is NULL");
    if (o->bucket_cap_bytes == 0 || o->first_bucket_bytes == 0)
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "opts: bucket_cap_bytes and first_bucket_bytes must be > 0");
    if (o->op != BRAID_AVG && o->op != BRAID_SUM)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: op %d is not BRAID_AVG or BRAID_SUM",
                             (int)o->op);
    if (o->hook && !o->hook->launch)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: hook->launch is NULL");
    if (o->zero_stage < 0 || o->zero_stage > 2)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: zero_stage %d (0, 1 or 2)",
                             o->zero_stage);
    if (o->zero_stage && o->hook)
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "opts: a hook cannot be combined with zero_stage %d", o->zero_stage);
    if (o->zero_stage == 2 && o->staging_buffers < 1)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "opts: staging_buffers %d (must be >= 1)",
                             o->staging_buffers);
    for (int i = 0; i < nparams; i++) {
        const braid_ddp_param_t *p = &params[i];
        if (braid_dtype_size(p->dtype) == 0)
            return ddp_set_error(BRAID_ERR_INVALID_ARG, "params[%d]: invalid dtype %d", i,
                                 (int)p->dtype);
        if (p->count == 0) return ddp_set_error(BRAID_ERR_INVALID_ARG, "params[%d]: count is 0", i);
        if (p->rows > 1 && p->count % p->rows)
            return ddp_set_error(BRAID_ERR_INVALID_ARG,
                                 "params[%d]: count %zu is not a multiple of rows %zu", i, p->count,
                                 p->rows);
        if (!p->param) return ddp_set_error(BRAID_ERR_INVALID_ARG, "params[%d].param is NULL", i);
        if (!p->grad && !o->grad_as_bucket_view)
            return ddp_set_error(BRAID_ERR_INVALID_ARG,
                                 "params[%d].grad is NULL (and grad_as_bucket_view is off)", i);
    }
    return BRAID_SUCCESS;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Every rank must have registered the same parameter list and options, else the buckets
 * (and so the collectives) would differ: all-gather a signature and compare. */
static braid_result_t check_same_everywhere(struct braid_ddp *d)
{
    uint64_t h = 1469598103934665603ull;
    h = fnv(h, &d->nparams, sizeof(d->nparams));
    for (int i = 0; i < d->nparams; i++) {
        uint64_t c = d->params[i].count, rows = d->params[i].rows;
        int dt = (int)d->params[i].dtype;
        h = fnv(h, &c, sizeof(c));
        h = fnv(h, &rows, sizeof(rows));
        h = fnv(h, &dt, sizeof(dt));
    }
    /* The options that change the collectives: bucket sizes, op, find_unused_parameters,
     * zero_stage, broadcast_params (nparams broadcasts at creation), and the hook's shape
     * (custom or not, next() or not: two collectives per bucket; complete() or not). */
    uint64_t o[9] = {d->opts.bucket_cap_bytes,
                     d->opts.first_bucket_bytes,
                     (uint64_t)d->opts.op,
                     (uint64_t) !!d->opts.find_unused_parameters,
                     (uint64_t)d->opts.zero_stage,
                     (uint64_t) !!d->opts.broadcast_params,
                     (uint64_t)!d->default_hook,
                     (uint64_t)(d->hook.next != NULL),
                     (uint64_t)(d->hook.complete != NULL)};
    h = fnv(h, o, sizeof(o));
    uint64_t *all = malloc((size_t)d->nranks * sizeof(uint64_t));
    if (!all) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    braid_result_t r = braid_allgather(&h, all, 1, BRAID_UINT64, d->comm);
    if (r) {
        free(all);
        return ddp_set_error(r, "ddp create: exchanging the parameter list: %s",
                             braid_last_error());
    }
    for (int k = 0; k < d->nranks; k++)
        if (all[k] != all[0]) {
            free(all);
            return ddp_set_error(BRAID_ERR_MISMATCH,
                                 "ddp create: rank %d registered different parameters (counts, "
                                 "dtypes, rows) or options (bucket sizes, op, "
                                 "find_unused_parameters, zero_stage, broadcast_params, hook) than "
                                 "rank 0",
                                 k);
        }
    free(all);
    return BRAID_SUCCESS;
}

void braid_ddp_destroy(braid_ddp_t d)
{
    if (!d) return;
    for (int b = 0; b < d->nbuckets; b++) {
        if (d->buckets[b].req) braid_wait(d->buckets[b].req);
        if (d->opts.zero_stage != 2) free(d->buckets[b].data);
        free(d->buckets[b].pdata);
        free(d->buckets[b].params);
    }
    ddp_zero2_free(d);
    free(d->buckets);
    free(d->params);
    free(d->ready);
    free(d->accum);
    free(d->pbucket);
    free(d->poff);
    free(d);
}

braid_result_t braid_ddp_create(braid_ddp_t *ddp_p, braid_comm_t comm,
                                const braid_ddp_param_t *params, int nparams,
                                const braid_ddp_options_t *opts)
{
    braid_ddp_options_t o;
    if (opts)
        o = *opts;
    else
        braid_ddp_options_init(&o);
    braid_result_t r = check_args(ddp_p, comm, params, nparams, &o);
    if (r) return r;
    struct braid_ddp *d = calloc(1, sizeof(*d));
    if (!d) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    d->comm = comm;
    d->opts = o;
    d->hook.launch = default_launch;
    if (o.hook) d->hook = *o.hook;
    d->default_hook = d->hook.launch == default_launch;
    d->opts.hook = NULL;
    d->nparams = nparams;
    if ((r = braid_comm_rank(comm, &d->rank)) || (r = braid_comm_size(comm, &d->nranks))) {
        free(d);
        return ddp_set_error(r, "ddp create: comm: %s", braid_last_error());
    }
    d->params = malloc((size_t)nparams * sizeof(*d->params));
    d->ready = calloc((size_t)nparams, sizeof(int));
    d->accum = calloc((size_t)nparams, sizeof(int));
    d->pbucket = malloc((size_t)nparams * sizeof(int));
    d->poff = malloc((size_t)nparams * sizeof(size_t));
    if (!d->params || !d->ready || !d->accum || !d->pbucket || !d->poff) goto nomem;
    memcpy(d->params, params, (size_t)nparams * sizeof(*params));
    d->nbuckets = ddp_assign_buckets(params, nparams, o.first_bucket_bytes, o.bucket_cap_bytes,
                                     d->pbucket, d->poff, &d->buckets);
    if (d->nbuckets < 0) {
        d->nbuckets = 0;
        goto nomem;
    }
    for (int b = 0; b < d->nbuckets && o.zero_stage != 2; b++) {
        ddp_bucket_t *bk = &d->buckets[b];
        bk->shard = (bk->count + (size_t)d->nranks - 1) / (size_t)d->nranks;
        bk->padded = o.zero_stage ? bk->shard * (size_t)d->nranks : bk->count;
        size_t sz = (bk->padded * braid_dtype_size(bk->dtype) + 63) & ~(size_t)63;
        bk->data = aligned_alloc(64, sz);
        if (!bk->data) goto nomem;
        memset(bk->data, 0, sz);
        if (o.zero_stage) {
            bk->pdata = aligned_alloc(64, sz);
            if (!bk->pdata) goto nomem;
            memset(bk->pdata, 0, sz);
        }
    }
    if (o.zero_stage == 2 && ddp_zero2_alloc(d)) goto nomem;
    if (o.grad_as_bucket_view)
        for (int i = 0; i < nparams; i++)
            d->params[i].grad = o.zero_stage == 2 ? NULL : bucket_slot(d, i);
    reset_step(d);
    if ((r = check_same_everywhere(d))) goto fail;
    if (o.broadcast_params)
        for (int i = 0; i < nparams; i++) {
            r = braid_broadcast(d->params[i].param, d->params[i].param, d->params[i].count,
                                d->params[i].dtype, 0, comm);
            if (r) {
                char nb[32];
                r = ddp_set_error(r, "ddp create: broadcast of %s from rank 0: %s",
                                  pname(d, i, nb, sizeof(nb)), braid_last_error());
                goto fail;
            }
        }
    if (o.zero_stage) ddp_zero_load_params(d);
    *ddp_p = d;
    return BRAID_SUCCESS;
nomem:
    r = ddp_set_error(BRAID_ERR_NOMEM, "ddp create: out of memory");
fail:
    braid_ddp_destroy(d);
    return r;
}

/* ZeRO-2: parameter i's bucket takes its staging buffer for this step (zero2.c) before the
 * gradient is written. Refused once the bucket's reduce-scatter has started: the buffer then
 * belongs to the reduction in flight, or (done) went back to the pool, and the step's reduced
 * gradients exist only as the owned shard. Other errors (out of memory, a wait for the bucket
 * holding the buffer) fail the layer: peers may be waiting for this bucket. */
static braid_result_t take_staging(struct braid_ddp *d, int i, const char *who)
{
    int b = d->pbucket[i];
    char nb[32];
    if (d->buckets[b].launched)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                             "%s: %s: its bucket %d is already being reduced in this step (with "
                             "zero_stage 2 only the owned shard's reduced gradients are kept: "
                             "braid_ddp_shard after finish)",
                             who, pname(d, i, nb, sizeof(nb)), b);
    braid_result_t r = ddp_zero2_acquire(d, b);
    if (!r) return BRAID_SUCCESS;
    if (!d->failed) {
        d->failed = r;
        snprintf(d->failmsg, sizeof(d->failmsg), "ddp rank %d: %s: %s", d->rank, who,
                 braid_ddp_last_error());
        ddp_abort_peers(d->comm, r);
    }
    return ddp_failed(d);
}

braid_result_t braid_ddp_grad_ready(braid_ddp_t d, int i)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (d->failed) return ddp_failed(d);
    if (i < 0 || i >= d->nparams)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "grad_ready: parameter index %d out of [0, %d)",
                             i, d->nparams);
    char nb[32];
    if (d->ready[i])
        return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                             "grad_ready: %s was already marked ready in this step",
                             pname(d, i, nb, sizeof(nb)));
    ddp_bucket_t *bk = &d->buckets[d->pbucket[i]];
    if (d->opts.zero_stage == 2) {
        if (d->opts.grad_as_bucket_view && !bk->data)
            return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                                 "grad_ready: %s: with zero_stage 2 its gradient must be written "
                                 "where braid_ddp_grad_buffer says, in this step",
                                 pname(d, i, nb, sizeof(nb)));
        braid_result_t r = take_staging(d, i, "grad_ready");
        if (r) return r;
    }
    d->ready[i] = 1;
    d->nready++;
    if (d->no_sync) {
        d->accum[i] = 1;
        return BRAID_SUCCESS;
    }
    if (!d->opts.grad_as_bucket_view)
        memcpy(bucket_slot(d, i), d->params[i].grad, param_bytes(d, i));
    if (--bk->pending == 0) bk->t_ready = ddp_now();
    braid_result_t r = launch_ready(d);
    if (r) return r;
    return poll_done(d);
}

/* Names of the parameters not ready, for the error message. */
static void missing_names(const struct braid_ddp *d, char *out, size_t len)
{
    size_t at = 0;
    int shown = 0, total = 0;
    out[0] = '\0';
    for (int i = 0; i < d->nparams; i++) {
        if (d->ready[i]) continue;
        total++;
        if (shown >= 8) continue;
        char nb[32];
        int k = snprintf(out + at, len - at, "%s%s (index %d)", shown ? ", " : "",
                         pname(d, i, nb, sizeof(nb)), i);
        if (k < 0 || (size_t)k >= len - at) break;
        at += (size_t)k;
        shown++;
    }
    if (total > shown) snprintf(out + at, len - at, " and %d more", total - shown);
}

braid_result_t braid_ddp_finish(braid_ddp_t d)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (d->failed) return ddp_failed(d);
    if (d->no_sync) {
        reset_step(d);
        return BRAID_SUCCESS;
    }
    braid_result_t r;
    if (d->nready < d->nparams) {
        if (!d->opts.find_unused_parameters) {
            char names[400];
            missing_names(d, names, sizeof(names));
            /* Buckets before the first incomplete one were launched by every rank that got
             * this far: drain them, then abort so that a rank which did launch more does not
             * wait for us until its timeout. */
            wait_launched(d);
            braid_comm_abort(d->comm);
            d->failed = BRAID_ERR_INVALID_USAGE;
            snprintf(d->failmsg, sizeof(d->failmsg),
                     "ddp rank %d: expected every gradient to be ready before finish; never "
                     "marked ready: %s (set find_unused_parameters to reduce unused ones as "
                     "zeros); the communicator was aborted",
                     d->rank, names);
            return ddp_failed(d);
        }
        for (int i = d->nparams - 1; i >= 0; i--) {
            if (d->ready[i]) continue;
            if (d->opts.zero_stage == 2 && (r = take_staging(d, i, "finish"))) return r;
            if (d->accum[i]) {
                /* Unused in this micro-batch but not in an earlier no_sync one: its
                 * accumulated gradient is reduced (as PyTorch's DDP does), not zeros. */
                if (!d->opts.grad_as_bucket_view)
                    memcpy(bucket_slot(d, i), d->params[i].grad, param_bytes(d, i));
            } else {
                memset(bucket_slot(d, i), 0, param_bytes(d, i));
                if (!d->opts.grad_as_bucket_view) memset(d->params[i].grad, 0, param_bytes(d, i));
            }
            d->ready[i] = 1;
            d->nready++;
            ddp_bucket_t *bk = &d->buckets[d->pbucket[i]];
            if (--bk->pending == 0) bk->t_ready = ddp_now();
        }
    }
    if ((r = launch_ready(d))) return r;
    if ((r = wait_launched(d))) return r;
    if (!d->opts.grad_as_bucket_view && !d->opts.zero_stage)
        for (int i = 0; i < d->nparams; i++)
            memcpy(d->params[i].grad, bucket_slot(d, i), param_bytes(d, i));
    memset(d->accum, 0, (size_t)d->nparams * sizeof(int));
    reset_step(d);
    d->steps++;
    return BRAID_SUCCESS;
}

braid_result_t braid_ddp_poll(braid_ddp_t d)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (d->failed) return ddp_failed(d);
    if (d->no_sync) return BRAID_SUCCESS;
    return poll_done(d);
}

braid_result_t braid_ddp_no_sync(braid_ddp_t d, int enable)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (d->opts.zero_stage == 2 && enable)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                             "no_sync: not supported with zero_stage 2 (only the owned shard's "
                             "gradients are kept)");
    if (d->nready)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                             "no_sync: called in the middle of a step (%d gradients ready); "
                             "call it between finish and the next step",
                             d->nready);
    d->no_sync = !!enable;
    return BRAID_SUCCESS;
}

void *braid_ddp_grad(braid_ddp_t d, int i)
{
    if (!d || i < 0 || i >= d->nparams) return NULL;
    if (d->opts.zero_stage == 2 && d->opts.grad_as_bucket_view)
        return d->buckets[d->pbucket[i]].data ? bucket_slot(d, i) : NULL;
    return d->params[i].grad;
}

braid_result_t braid_ddp_grad_buffer(braid_ddp_t d, int i, void **grad_p)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (!grad_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "grad_p is NULL");
    if (i < 0 || i >= d->nparams)
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "grad_buffer: parameter index %d out of [0, %d)", i, d->nparams);
    if (d->failed) return ddp_failed(d);
    if (d->opts.zero_stage == 2 && d->opts.grad_as_bucket_view) {
        braid_result_t r = take_staging(d, i, "grad_buffer");
        if (r) return r;
        *grad_p = bucket_slot(d, i);
        return BRAID_SUCCESS;
    }
    *grad_p = d->params[i].grad;
    return BRAID_SUCCESS;
}

void braid_ddp_zero_grad(braid_ddp_t d)
{
    if (!d) return;
    if (d->opts.zero_stage == 2 && d->opts.grad_as_bucket_view) return; /* zeroed when taken */
    for (int i = 0; i < d->nparams; i++)
        memset(d->params[i].grad, 0, param_bytes(d, i));
}

int braid_ddp_num_buckets(braid_ddp_t d)
{
    return d ? d->nbuckets : 0;
}

braid_result_t braid_ddp_bucket_info(braid_ddp_t d, int b, braid_ddp_bucket_info_t *info_p)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (!info_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "info_p is NULL");
    if (b < 0 || b >= d->nbuckets)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "bucket %d out of [0, %d)", b, d->nbuckets);
    const ddp_bucket_t *bk = &d->buckets[b];
    info_p->count = bk->count;
    info_p->bytes = bk->bytes;
    info_p->dtype = bk->dtype;
    info_p->nparams = bk->nparams;
    info_p->params = bk->params;
    info_p->t_ready = bk->t_ready;
    info_p->t_launch = bk->t_launch;
    info_p->t_done = bk->t_done;
    return BRAID_SUCCESS;
}

int braid_ddp_param_bucket(braid_ddp_t d, int i, size_t *offset_p)
{
    if (!d || i < 0 || i >= d->nparams) return -1;
    if (offset_p) *offset_p = d->poff[i];
    return d->pbucket[i];
}
