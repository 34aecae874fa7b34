/* ZeRO stage 1 on the DDP layer: buckets are reduce-scattered instead of all-reduced (ddp.c
 * launches them), each rank's optimizer updates its shard of every bucket in a flat copy of
 * the parameters (pdata), and braid_ddp_gather_params all-gathers those copies in place and
 * copies them out to the registered parameter buffers.
 *
 * Shards: bucket b of count elements is padded with zeros to nranks * shard elements, shard =
 * ceil(count / nranks); rank r owns [r * shard, (r + 1) * shard) clipped to count. */
#include "ddp_impl.h"

#include <stdio.h>
#include <string.h>

static void *param_slot(const struct braid_ddp *d, int i)
{
    const ddp_bucket_t *bk = &d->buckets[d->pbucket[i]];
    return (char *)bk->pdata + d->poff[i] * braid_dtype_size(bk->dtype);
}

void ddp_zero_load_params(struct braid_ddp *d)
{
    for (int i = 0; i < d->nparams; i++)
        memcpy(param_slot(d, i), d->params[i].param,
               d->params[i].count * braid_dtype_size(d->params[i].dtype));
}

braid_result_t braid_ddp_shard(braid_ddp_t d, int b, braid_ddp_shard_t *shard_p)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (!shard_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "shard_p is NULL");
    if (!d->opts.zero_stage)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE, "braid_ddp_shard: zero_stage is 0");
    if (b < 0 || b >= d->nbuckets)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "bucket %d out of [0, %d)", b, d->nbuckets);
    const ddp_bucket_t *bk = &d->buckets[b];
    size_t es = braid_dtype_size(bk->dtype);
    size_t lo = (size_t)d->rank * bk->shard;
    size_t hi = lo + bk->shard < bk->count ? lo + bk->shard : bk->count;
    shard_p->offset = lo;
    shard_p->count = hi > lo ? hi - lo : 0;
    shard_p->grad = d->opts.zero_stage == 2 ? bk->sgrad : (char *)bk->data + lo * es;
    shard_p->param = (char *)bk->pdata + lo * es;
    shard_p->dtype = bk->dtype;
    return BRAID_SUCCESS;
}

braid_result_t braid_ddp_gather_params(braid_ddp_t d)
{
    if (!d) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ddp is NULL");
    if (!d->opts.zero_stage)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE, "braid_ddp_gather_params: zero_stage is 0");
    if (d->failed) return ddp_set_error(d->failed, "%s", d->failmsg);
    if (d->nready)
        return ddp_set_error(BRAID_ERR_INVALID_USAGE,
                             "braid_ddp_gather_params: called in the middle of a step");
    braid_request_t reqs[64];
    braid_result_t first = BRAID_SUCCESS;
    /* In windows of up to 64 requests in flight (they complete in order). */
    for (int b0 = 0; b0 < d->nbuckets; b0 += 64) {
        int nb = d->nbuckets - b0 < 64 ? d->nbuckets - b0 : 64, started = 0;
        for (int k = 0; k < nb; k++) {
            ddp_bucket_t *bk = &d->buckets[b0 + k];
            size_t es = braid_dtype_size(bk->dtype);
            braid_result_t r =
                braid_iallgather((char *)bk->pdata + (size_t)d->rank * bk->shard * es, bk->pdata,
                                 bk->shard, bk->dtype, d->comm, &reqs[k]);
            if (r) {
                if (!first)
                    first = ddp_set_error(r, "ddp rank %d: gather of bucket %d: %s", d->rank,
                                          b0 + k, braid_last_error());
                break;
            }
            started++;
            d->sent_bytes += ddp_ring_bytes(d, bk->padded * es, 1);
        }
        for (int k = 0; k < started; k++) {
            braid_result_t r = braid_wait(reqs[k]);
            if (r && !first)
                first = ddp_set_error(r, "ddp rank %d: gather of bucket %d: %s", d->rank, b0 + k,
                                      braid_last_error());
        }
        if (first) break;
    }
    if (first) {
        d->failed = first;
        snprintf(d->failmsg, sizeof(d->failmsg), "%s", braid_ddp_last_error());
        ddp_abort_peers(d->comm, first); /* a gather not started here: peers wait in it */
        return first;
    }
    for (int i = 0; i < d->nparams; i++)
        memcpy(d->params[i].param, param_slot(d, i),
               d->params[i].count * braid_dtype_size(d->params[i].dtype));
    return BRAID_SUCCESS;
}
