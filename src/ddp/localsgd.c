/* Local SGD (periodic model averaging) on braid's public API: the registered buffers (the
 * parameters and, if the caller chose, its optimizer state) are all-reduced with BRAID_AVG in
 * place every period-th local step. One braid_iallreduce per buffer, started in registration
 * order in windows of up to 64 requests and waited in that order (they complete in order). */
#include "ddp_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct braid_ddp_localsgd {
    braid_comm_t comm;
    int rank, nbufs, period, since;
    braid_ddp_param_t *bufs;
    size_t bytes;
    long averages;
    braid_result_t failed;
    char failmsg[1024];
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

void braid_ddp_localsgd_destroy(braid_ddp_localsgd_t ls)
{
    if (!ls) return;
    free(ls->bufs);
    free(ls);
}

braid_result_t braid_ddp_localsgd_create(braid_ddp_localsgd_t *ls_p, braid_comm_t comm,
                                         const braid_ddp_param_t *bufs, int nbufs, int period)
{
    if (!ls_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ls_p is NULL");
    if (!comm) return ddp_set_error(BRAID_ERR_INVALID_ARG, "comm is NULL");
    if (nbufs <= 0) return ddp_set_error(BRAID_ERR_INVALID_ARG, "nbufs is %d (must be > 0)", nbufs);
    if (!bufs) return ddp_set_error(BRAID_ERR_INVALID_ARG, "bufs is NULL");
    if (period < 1)
        return ddp_set_error(BRAID_ERR_INVALID_ARG, "period is %d (must be >= 1)", period);
    for (int i = 0; i < nbufs; i++) {
        if (braid_dtype_size(bufs[i].dtype) == 0)
            return ddp_set_error(BRAID_ERR_INVALID_ARG, "bufs[%d]: invalid dtype %d", i,
                                 (int)bufs[i].dtype);
        if (bufs[i].count == 0)
            return ddp_set_error(BRAID_ERR_INVALID_ARG, "bufs[%d]: count is 0", i);
        if (!bufs[i].param)
            return ddp_set_error(BRAID_ERR_INVALID_ARG, "bufs[%d].param is NULL", i);
    }
    struct braid_ddp_localsgd *ls = calloc(1, sizeof(*ls));
    if (!ls) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    ls->bufs = malloc((size_t)nbufs * sizeof(*bufs));
    if (!ls->bufs) {
        free(ls);
        return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    }
    memcpy(ls->bufs, bufs, (size_t)nbufs * sizeof(*bufs));
    ls->comm = comm;
    ls->nbufs = nbufs;
    ls->period = period;
    int n = 0;
    braid_result_t r;
    if ((r = braid_comm_rank(comm, &ls->rank)) || (r = braid_comm_size(comm, &n))) {
        braid_ddp_localsgd_destroy(ls);
        return ddp_set_error(r, "localsgd create: comm: %s", braid_last_error());
    }
    /* Every rank must average the same buffers at the same steps. */
    uint64_t h = 1469598103934665603ull;
    h = fnv(h, &nbufs, sizeof(nbufs));
    h = fnv(h, &period, sizeof(period));
    for (int i = 0; i < nbufs; i++) {
        uint64_t c = bufs[i].count;
        int dt = (int)bufs[i].dtype;
        h = fnv(h, &c, sizeof(c));
        h = fnv(h, &dt, sizeof(dt));
    }
    uint64_t *all = malloc((size_t)n * sizeof(uint64_t));
    if (!all) {
        braid_ddp_localsgd_destroy(ls);
        return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    }
    r = braid_allgather(&h, all, 1, BRAID_UINT64, comm);
    if (r) {
        free(all);
        braid_ddp_localsgd_destroy(ls);
        return ddp_set_error(r, "localsgd create: exchanging the buffer list: %s",
                             braid_last_error());
    }
    for (int k = 0; k < n; k++)
        if (all[k] != all[0]) {
            free(all);
            braid_ddp_localsgd_destroy(ls);
            return ddp_set_error(BRAID_ERR_MISMATCH,
                                 "localsgd create: rank %d registered different buffers (counts, "
                                 "dtypes) or period than rank 0",
                                 k);
        }
    free(all);
    *ls_p = ls;
    return BRAID_SUCCESS;
}

static braid_result_t average(struct braid_ddp_localsgd *ls)
{
    if (ls->failed) return ddp_set_error(ls->failed, "%s", ls->failmsg);
    braid_request_t reqs[64];
    braid_result_t first = BRAID_SUCCESS;
    for (int b0 = 0; b0 < ls->nbufs && !first; b0 += 64) {
        int nb = ls->nbufs - b0 < 64 ? ls->nbufs - b0 : 64, started = 0;
        for (int k = 0; k < nb; k++) {
            const braid_ddp_param_t *b = &ls->bufs[b0 + k];
            braid_result_t r = braid_iallreduce(b->param, b->param, b->count, b->dtype, BRAID_AVG,
                                                ls->comm, &reqs[k]);
            if (r) {
                first =
                    ddp_set_error(r, "localsgd rank %d: average of buffer %d (%s): %s", ls->rank,
                                  b0 + k, b->name ? b->name : "unnamed", braid_last_error());
                break;
            }
            ls->bytes += b->count * braid_dtype_size(b->dtype);
            started++;
        }
        for (int k = 0; k < started; k++) {
            braid_result_t r = braid_wait(reqs[k]);
            if (r && !first)
                first = ddp_set_error(r, "localsgd rank %d: average of buffer %d: %s", ls->rank,
                                      b0 + k, braid_last_error());
        }
    }
    ls->since = 0;
    if (first) {
        ls->failed = first;
        snprintf(ls->failmsg, sizeof(ls->failmsg), "%s", braid_ddp_last_error());
        ddp_abort_peers(ls->comm, first); /* an average not started here: peers wait in it */
        return first;
    }
    ls->averages++;
    return BRAID_SUCCESS;
}

braid_result_t braid_ddp_localsgd_step(braid_ddp_localsgd_t ls, int *averaged_p)
{
    if (averaged_p) *averaged_p = 0;
    if (!ls) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ls is NULL");
    if (++ls->since < ls->period) return BRAID_SUCCESS;
    braid_result_t r = average(ls);
    if (!r && averaged_p) *averaged_p = 1;
    return r;
}

braid_result_t braid_ddp_localsgd_sync(braid_ddp_localsgd_t ls)
{
    if (!ls) return ddp_set_error(BRAID_ERR_INVALID_ARG, "ls is NULL");
    return ls->since ? average(ls) : BRAID_SUCCESS;
}

size_t braid_ddp_localsgd_bytes(braid_ddp_localsgd_t ls, long *averages_p)
{
    if (averages_p) *averages_p = ls ? ls->averages : 0;
    return ls ? ls->bytes : 0;
}
