/* Bucket assignment, in the manner of PyTorch's compute_bucket_assignment_by_size: parameters
 * are taken in reverse registration order (backward produces the last layer's gradients
 * first); each dtype has one open bucket; a parameter that would push its open bucket past the
 * capacity closes it and opens a new one, so a bucket never exceeds its capacity unless it
 * holds a single parameter larger than the capacity. The first bucket created has capacity
 * first_cap (small, so that communication starts early), later ones cap. Buckets are numbered
 * in creation order, which is the launch order. */
#include "ddp_impl.h"

#include <stdlib.h>
#include <string.h>

int ddp_assign_buckets(const braid_ddp_param_t *params, int nparams, size_t first_cap, size_t cap,
                       int *pbucket, size_t *poff, ddp_bucket_t **buckets_p)
{
    /* At most one bucket per parameter. */
    ddp_bucket_t *b = calloc((size_t)nparams, sizeof(*b));
    if (!b) return -1;
    int open[BRAID_NUM_DTYPES];
    for (int d = 0; d < BRAID_NUM_DTYPES; d++)
        open[d] = -1;
    int nb = 0;
    for (int i = nparams - 1; i >= 0; i--) {
        braid_datatype_t dt = params[i].dtype;
        size_t bytes = params[i].count * braid_dtype_size(dt);
        int k = open[dt];
        if (k >= 0 && b[k].bytes + bytes > (k == 0 ? first_cap : cap)) k = open[dt] = -1;
        if (k < 0) {
            k = open[dt] = nb++;
            b[k].dtype = dt;
        }
        pbucket[i] = k;
        poff[i] = b[k].count;
        b[k].count += params[i].count;
        b[k].bytes += bytes;
        b[k].nparams++;
        if (b[k].bytes >= (k == 0 ? first_cap : cap)) open[dt] = -1;
    }
    for (int k = 0; k < nb; k++) {
        b[k].params = malloc((size_t)b[k].nparams * sizeof(int));
        if (!b[k].params) {
            for (int j = 0; j < k; j++)
                free(b[j].params);
            free(b);
            return -1;
        }
        b[k].nparams = 0;
    }
    for (int i = nparams - 1; i >= 0; i--) {
        ddp_bucket_t *bk = &b[pbucket[i]];
        bk->params[bk->nparams++] = i;
    }
    *buckets_p = b;
    return nb;
}
