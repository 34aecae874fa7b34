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

int braid_topo_ring_numa_crossings(int n, const int *host, const int *numa, const int *order)
{
    int x = 0;
    for (int i = 0; numa && i < n; i++) {
        int a = order[i], b = order[(i + 1) % n];
        x += host[a] == host[b] && numa[a] != numa[b];
    }
    return x;
}

int braid_topo_min_numa_crossings(int n, const int *host, const int *numa)
{
    if (!numa) return 0;
    /* Distinct (host, numa) pairs and distinct hosts, quadratic: n is a communicator's size
     * and this runs in tests and braid-info only. */
    int pairs = 0, hosts = 0;
    for (int r = 0; r < n; r++) {
        int new_pair = 1, new_host = 1;
        for (int q = 0; q < r; q++) {
            if (host[q] == host[r]) new_host = 0;
            if (host[q] == host[r] && numa[q] == numa[r]) new_pair = 0;
        }
        pairs += new_pair;
        hosts += new_host;
    }
    /* Each host with k ids needs k - 1 crossings; a lone host closing the ring one more. */
    int x = pairs - hosts;
    return hosts == 1 && x > 0 ? x + 1 : x;
}

braid_result_t braid_topo_rings_print(int n, const char *labels, size_t stride, const int *numa,
                                      int nchannels, FILE *f)
{
    braid_topo_t t;
    BRAID_CHECK(braid_topo_group(n, labels, stride, &t));
    int *order = calloc((size_t)n, sizeof(int)), *ranks = calloc((size_t)n, sizeof(int));
    if (!order || !ranks) {
        free(order);
        free(ranks);
        braid_topo_free(&t);
        return braid_set_error(BRAID_ERR_NOMEM, "rings: out of memory for %d ranks", n);
    }
    fprintf(f, "%d rank(s) on %d host(s), %d channel(s), NUMA nodes %s\n", n, t.nhosts, nchannels,
            numa ? "given" : "unknown");
    for (int h = 0; h < t.nhosts; h++) {
        int m = braid_topo_host_ranks(&t, h, ranks);
        if (m < 1) continue; /* every host has a rank; keeps the compiler sure of ranks[0] */
        fprintf(f, "  host %s: ranks", labels + (size_t)ranks[0] * stride);
        for (int i = 0; i < m; i++) {
            fprintf(f, " %d", ranks[i]);
            if (numa) fprintf(f, "(numa %d)", numa[ranks[i]]);
        }
        fprintf(f, "\n");
    }
    int fewest_h = t.nhosts > 1 ? t.nhosts : 0;
    int fewest_n = braid_topo_min_numa_crossings(n, t.host, numa);
    braid_result_t res = BRAID_SUCCESS;
    for (int ch = 0; ch < nchannels && res == BRAID_SUCCESS; ch++) {
        /* Every channel of a communicator uses this one order (comm->ring_order). */
        res = braid_topo_ring_order(n, t.host, numa, order);
        if (res != BRAID_SUCCESS) break;
        fprintf(f, "channel %d ring:", ch);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s %d", i && t.host[order[i]] != t.host[order[i - 1]] ? " |" : "",
                    order[i]);
        fprintf(f, "\n  host crossings %d (fewest %d), NUMA crossings %d (fewest %d)\n",
                braid_topo_ring_crossings(n, t.host, order), fewest_h,
                braid_topo_ring_numa_crossings(n, t.host, numa, order), fewest_n);
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    if (res == BRAID_SUCCESS)
        fprintf(f, "rank-order ring for comparison: host crossings %d, NUMA crossings %d\n",
                braid_topo_ring_crossings(n, t.host, order),
                braid_topo_ring_numa_crossings(n, t.host, numa, order));
    free(order);
    free(ranks);
    braid_topo_free(&t);
    return res;
}
