/* ZeRO stage 2 on the DDP layer: the owned shard of every bucket keeps its reduced gradients
 * (sgrad, shard elements); the full gradients of a bucket exist only in a staging buffer that
 * the bucket holds from its first braid_ddp_grad_buffer (or grad_ready) of the step until its
 * reduce-scatter (staging -> sgrad, launched by ddp.c as the bucket fills) has completed. The
 * pool keeps opts.staging_buffers buffers of the largest padded bucket's size; when all are
 * taken, the oldest bucket in flight is waited for (it completes first: buckets complete in
 * launch order); when none is in flight, the pool grows (the high-water mark is reported).
 * Also the layer's memory/traffic report, braid_ddp_stats. */
#include "ddp_impl.h"

#include <stdlib.h>
#include <string.h>

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int ddp_zero2_alloc(struct braid_ddp *d)
{
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
        if (round64(bk->padded * es) > d->staging_size) d->staging_size = round64(bk->padded * es);
    }
    return 0;
}

static braid_result_t grow(struct braid_ddp *d, int *k_p)
{
    int n = d->nstaging + 1;
    void **st = realloc(d->staging, (size_t)n * sizeof(void *));
    if (!st) return ddp_set_error(BRAID_ERR_NOMEM, "zero2: out of memory (staging buffer)");
    d->staging = st;
    int *ow = realloc(d->owner, (size_t)n * sizeof(int));
    if (!ow) return ddp_set_error(BRAID_ERR_NOMEM, "zero2: out of memory (staging buffer)");
    d->owner = ow;
    void *buf = aligned_alloc(64, d->staging_size);
    if (!buf) return ddp_set_error(BRAID_ERR_NOMEM, "zero2: out of memory (staging buffer)");
    d->staging[d->nstaging] = buf;
    d->owner[d->nstaging] = -1;
    *k_p = d->nstaging++;
    return BRAID_SUCCESS;
}

braid_result_t ddp_zero2_acquire(struct braid_ddp *d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    if (bk->data) return BRAID_SUCCESS;
    int k = -1;
    while (k < 0) {
        for (int j = 0; j < d->nstaging && k < 0; j++)
            if (d->owner[j] < 0) k = j;
        if (k >= 0) break;
        braid_result_t r;
        if (d->nstaging < d->opts.staging_buffers || d->next_done >= d->next_launch)
            r = grow(d, &k); /* below the cap, or nothing in flight that would free one */
        else
            r = ddp_wait_next(d); /* the oldest bucket in flight releases its buffer */
        if (r) return r;
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
    for (int k = 0; k < d->nstaging; k++)
        free(d->staging[k]);
    free(d->staging);
    free(d->owner);
    d->staging = NULL;
    d->owner = NULL;
    d->nstaging = 0;
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
    s->staging_bytes = (size_t)d->nstaging * d->staging_size;
    s->sent_bytes = d->sent_bytes;
    s->steps = d->steps;
    return BRAID_SUCCESS;
}
