/* ZeRO stage 2 on the DDP layer: the owned shard of every bucket keeps its reduced gradients
 * (sgrad, shard elements); the full gradients of a bucket exist only in a staging buffer that
 * the bucket holds from its first braid_ddp_grad_buffer (or grad_ready) of the step until its
 * reduce-scatter (staging -> sgrad, launched by ddp.c as the bucket fills) has completed.
 *
 * The pool, sized per bucket: with S = opts.staging_buffers, bucket b's own slot is b % S, and
 * slot k's size is the largest padded bucket among b = k, k + S, k + 2S, ... (not the largest
 * bucket overall: a model with one big parameter pays for it once, not S times). A bucket whose
 * slot is held by bucket b - S (launched: buckets complete in launch order) waits for it; a
 * bucket whose slot is held by one not launched yet (gradients produced out of bucket order,
 * or all taken before any is ready) takes an extra buffer of its own size instead (extras are
 * kept and reused by the smallest that fits). Buffers are allocated at first use, so
 * braid_ddp_stats reports what was really allocated (the high-water mark). Also the layer's
 * memory/traffic report, braid_ddp_stats. */
#include "ddp_impl.h"

#include <stdlib.h>
#include <string.h>

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t staged_bytes(const ddp_bucket_t *bk)
{
    return round64(bk->padded * braid_dtype_size(bk->dtype));
}

int ddp_zero2_alloc(struct braid_ddp *d)
{
    int s = d->opts.staging_buffers;
    d->nfixed = d->nstaging = d->nbuckets < s ? d->nbuckets : s;
    d->staging = calloc((size_t)d->nstaging + 1, sizeof(void *));
    d->stcap = calloc((size_t)d->nstaging + 1, sizeof(size_t));
    d->owner = malloc(((size_t)d->nstaging + 1) * sizeof(int));
    if (!d->staging || !d->stcap || !d->owner) return -1;
    for (int k = 0; k < d->nstaging; k++)
        d->owner[k] = -1;
    for (int b = 0; b < d->nbuckets; b++) {
        ddp_bucket_t *bk = &d->buckets[b];
        size_t es = braid_dtype_size(bk->dtype);
        bk->shard = (bk->count + (size_t)d->nranks - 1) / (size_t)d->nranks;
        bk->padded = bk->shard * (size_t)d->nranks;
        bk->slot = -1;
        bk->data = NULL;
        bk->sgrad = aligned_alloc(64, round64(bk->shard * es));
        bk->pdata = aligned_alloc(64, round64(bk->padded * es));
        if (!bk->sgrad || !bk->pdata) return -1;
        memset(bk->sgrad, 0, round64(bk->shard * es));
        memset(bk->pdata, 0, round64(bk->padded * es));
        if (staged_bytes(bk) > d->stcap[b % s]) d->stcap[b % s] = staged_bytes(bk);
    }
    return 0;
}

/* A free extra slot of at least need bytes (the smallest), else a new one of need bytes. */
static braid_result_t extra_slot(struct braid_ddp *d, size_t need, int *k_p)
{
    int best = -1;
    for (int k = d->nfixed; k < d->nstaging; k++)
        if (d->owner[k] < 0 && d->stcap[k] >= need && (best < 0 || d->stcap[k] < d->stcap[best]))
            best = k;
    if (best >= 0) {
        *k_p = best;
        return BRAID_SUCCESS;
    }
    int n = d->nstaging + 1;
    void **st = realloc(d->staging, (size_t)n * sizeof(void *));
    if (st) d->staging = st;
    size_t *cap = st ? realloc(d->stcap, (size_t)n * sizeof(size_t)) : NULL;
    if (cap) d->stcap = cap;
    int *ow = cap ? realloc(d->owner, (size_t)n * sizeof(int)) : NULL;
    if (ow) d->owner = ow;
    void *buf = ow ? aligned_alloc(64, need) : NULL;
    if (!buf) return ddp_set_error(BRAID_ERR_NOMEM, "zero2: out of memory (staging buffer)");
    d->staging[d->nstaging] = buf;
    d->stcap[d->nstaging] = need;
    d->owner[d->nstaging] = -1;
    *k_p = d->nstaging++;
    return BRAID_SUCCESS;
}

braid_result_t ddp_zero2_acquire(struct braid_ddp *d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    /* launched: its buffer is the reduction's (or back in the pool): never take another one,
     * it would never be released (ddp.c refuses this before calling) */
    if (bk->launched)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE, "zero2: bucket %d already launched", b);
    if (bk->data) return BRAID_SUCCESS;
    int k = b % d->opts.staging_buffers;
    /* the bucket before us on this slot is in flight: it releases the slot when it completes
     * (bucket owner[k] is among next_done .. next_launch - 1, waited for in order) */
    while (d->owner[k] >= 0 && d->owner[k] < d->next_launch && d->next_done < d->next_launch) {
        braid_result_t r = ddp_wait_next(d);
        if (r) return r;
    }
    if (d->owner[k] >= 0) { /* held by a bucket still filling */
        braid_result_t r = extra_slot(d, staged_bytes(bk), &k);
        if (r) return r;
    } else if (!d->staging[k]) {
        d->staging[k] = aligned_alloc(64, d->stcap[k]);
        if (!d->staging[k])
            return ddp_set_error(BRAID_ERR_NOMEM, "zero2: out of memory (staging buffer)");
    }
    d->owner[k] = b;
    bk->slot = k;
    bk->data = d->staging[k];
    memset(bk->data, 0, bk->padded * braid_dtype_size(bk->dtype));
    return BRAID_SUCCESS;
}

void ddp_zero2_release(struct braid_ddp *d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    if (bk->slot >= 0) d->owner[bk->slot] = -1;
    bk->slot = -1;
    bk->data = NULL;
}

void ddp_zero2_free(struct braid_ddp *d)
{
    for (int k = 0; k < d->nstaging && d->staging; k++)
        free(d->staging[k]);
    free(d->staging);
    free(d->stcap);
    free(d->owner);
    d->staging = NULL;
    d->stcap = NULL;
    d->owner = NULL;
    d->nstaging = d->nfixed = 0;
    for (int b = 0; b < d->nbuckets; b++) {
        free(d->buckets[b].sgrad);
        d->buckets[b].sgrad = NULL;
        if (d->opts.zero_stage == 2) d->buckets[b].data = NULL;
    }
}

braid_result_t braid_ddp_stats(braid_ddp_t d, braid_ddp_stats_t *s)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (!s) return ddp_set_error(BRAID_ERR_INVALID_ARG, "stats_p is NULL");
    memset(s, 0, sizeof(*s));
    for (int b = 0; b < d->nbuckets; b++) {
        const ddp_bucket_t *bk = &d->buckets[b];
        size_t es = braid_dtype_size(bk->dtype);
        if (!d->opts.zero_stage) {
            s->grad_bytes += bk->bytes;
            s->shard_count += bk->count;
            s->padded_count += bk->count;
            continue;
        }
        size_t lo = (size_t)d->rank * bk->shard;
        size_t hi = lo + bk->shard < bk->count ? lo + bk->shard : bk->count;
        s->shard_count += hi > lo ? hi - lo : 0;
        s->padded_count += bk->padded;
        s->param_copy_bytes += bk->padded * es;
        s->grad_bytes += d->opts.zero_stage == 2 ? bk->shard * es : bk->padded * es;
    }
    for (int k = 0; k < d->nstaging; k++)
        if (d->staging[k]) s->staging_bytes += d->stcap[k];
    s->sent_bytes = d->sent_bytes;
    s->steps = d->steps;
    return BRAID_SUCCESS;
}
