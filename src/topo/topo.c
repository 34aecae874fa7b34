/* Host grouping and ring ordering (pure functions; see topo.h). */
#include "topo/topo.h"
#include "core/log.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int a, b, rank; /* sort keys, then the rank */
} key3_t;

static int cmp_key3(const void *x, const void *y)
{
    const key3_t *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    return p->rank < q->rank ? -1 : p->rank > q->rank;
}

void braid_topo_free(braid_topo_t *t)
{
    if (!t) return;
    free(t->host);
    free(t->local_rank);
    free(t->host_size);
    memset(t, 0, sizeof(*t));
}

braid_result_t braid_topo_group(int n, const char *ids, size_t stride, braid_topo_t *t_p)
{
    braid_topo_t t = {.nranks = n};
    t.host = calloc((size_t)n, sizeof(int));
    t.local_rank = calloc((size_t)n, sizeof(int));
    t.host_size = calloc((size_t)n, sizeof(int));
    if (!t.host || !t.local_rank || !t.host_size) {
        braid_topo_free(&t);
        return braid_set_error(BRAID_ERR_NOMEM, "topology: out of memory for %d ranks", n);
    }
    /* Quadratic in the number of hosts, linear in ranks per host: fine for thousands. The
     * first rank of each host (its representative) is kept in local_rank temporarily. */
    int *rep = t.local_rank;
    for (int r = 0; r < n; r++) {
        const char *id = ids + (size_t)r * stride;
        int h = 0;
        while (h < t.nhosts && strcmp(ids + (size_t)rep[h] * stride, id))
            h++;
        if (h == t.nhosts) rep[t.nhosts++] = r;
        t.host[r] = h;
    }
    for (int r = 0; r < n; r++)
        t.local_rank[r] = 0;
    for (int r = 0; r < n; r++)
        t.local_rank[r] = t.host_size[t.host[r]]++;
    t.min_local = n;
    t.max_local = 0;
    for (int h = 0; h < t.nhosts; h++) {
        if (t.host_size[h] < t.min_local) t.min_local = t.host_size[h];
        if (t.host_size[h] > t.max_local) t.max_local = t.host_size[h];
    }
    *t_p = t;
    return BRAID_SUCCESS;
}

int braid_topo_host_ranks(const braid_topo_t *t, int h, int *ranks)
{
    int m = 0;
    for (int r = 0; r < t->nranks; r++)
        if (t->host[r] == h) ranks[m++] = r;
    return m;
}

braid_result_t braid_topo_ring_order(int n, const int *host, const int *numa, int *order)
{
    key3_t *k = calloc((size_t)(n ? n : 1), sizeof(*k));
    if (!k) return braid_set_error(BRAID_ERR_NOMEM, "ring order: out of memory for %d ranks", n);
    /* Pass 1: sorted by (host id, rank), the first rank of each run is the host's lowest. */
    for (int r = 0; r < n; r++)
        k[r] = (key3_t){.a = host[r], .b = 0, .rank = r};
    qsort(k, (size_t)n, sizeof(*k), cmp_key3);
    for (int i = 0, first = 0; i < n; i++) {
        if (i > 0 && k[i].a != k[i - 1].a) first = i;
        order[k[i].rank] = k[first].rank; /* order[] as scratch: the host's lowest rank */
    }
    /* Pass 2: by (host's lowest rank, numa, rank). */
    for (int r = 0; r < n; r++)
        k[r] = (key3_t){.a = order[r], .b = numa ? numa[r] : 0, .rank = r};
    qsort(k, (size_t)n, sizeof(*k), cmp_key3);
    for (int i = 0; i < n; i++)
        order[i] = k[i].rank;
    free(k);
    return BRAID_SUCCESS;
}

int braid_topo_ring_crossings(int n, const int *host, const int *order)
{
    int x = 0;
    for (int i = 0; i < n; i++)
        x += host[order[i]] != host[order[(i + 1) % n]];
    return x;
}
