/* Topology-aware ring order with real processes: ranks numbered round-robin across two fake
 * hosts (BRAID_HOSTNAME, then a split re-reads the host identities), so rank order would cross
 * hosts at every edge; the ring must cross each host boundary once and every ring collective
 * must still give each rank its own result. Then fake NUMA nodes (BRAID_NUMA_ID) numbered
 * across the hosts: every rank must see every peer's published node, and the ring must cross
 * each host boundary once and NUMA boundaries the fewest times. */
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <string.h>

static int interleaved(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t sub = mp_fake_host_comm(comm, rank, rank % 2, "ring");
    MP_CHECK(rank, sub, "split");
    /* Hosts contiguous on the ring: exactly two crossings (one each way). */
    int crossings = 0;
    for (int q = 0; q < n; q++)
        crossings += (sub->ring_order[q] % 2) != (sub->ring_order[(q + 1) % n] % 2);
    MP_CHECK(rank, crossings == 2, "ring crosses hosts %d times", crossings);
    size_t counts[] = {1, 7, 1001};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t count = counts[ci];
        for (int dt = BRAID_INT32; dt < BRAID_NUM_DTYPES; dt += 3) {
            size_t es = braid_dtype_size(dt);
            char *in = malloc(count * (size_t)n * es), *out = malloc(count * (size_t)n * es);
            MP_CHECK(rank, in && out, "malloc");
            if (data_check_allreduce(sub, rank, n, dt, BRAID_SUM, count, 0, 0, 3, "ringorder"))
                return 1;
            data_fill(in, dt, BRAID_SUM, rank, 0, count * (size_t)n, 5);
            MP_OK(rank, braid_reduce_scatter(in, out, count, dt, BRAID_SUM, sub));
            MP_CHECK(rank,
                     !data_check_reduced(out, dt, BRAID_SUM, n, (size_t)rank * count, count, 5,
                                         "reduce_scatter"),
                     "reduce_scatter count %zu", count);
            data_fill(in, dt, BRAID_SUM, rank, 0, count, 6);
            MP_OK(rank, braid_allgather(in, out, count, dt, sub));
            for (int b = 0; b < n; b++)
                MP_CHECK(rank,
                         !data_check_rank(out + (size_t)b * count * es, dt, BRAID_SUM, b, 0, count,
                                          6, "allgather"),
                         "allgather block %d", b);
            for (int root = 0; root < n; root++) {
                data_fill(in, dt, BRAID_SUM, rank, 0, count, 7);
                MP_OK(rank, braid_broadcast(in, out, count, dt, root, sub));
                MP_CHECK(rank, !data_check_rank(out, dt, BRAID_SUM, root, 0, count, 7, "bcast"),
                         "broadcast root %d", root);
                data_fill(in, dt, BRAID_MAX, rank, 0, count, 7);
                MP_OK(rank, braid_reduce(in, out, count, dt, BRAID_MAX, root, sub));
                if (rank == root)
                    MP_CHECK(rank,
                             !data_check_reduced(out, dt, BRAID_MAX, n, 0, count, 7, "reduce"),
                             "reduce root %d", root);
            }
            free(in);
            free(out);
        }
    }
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

TestSuite(ringorder, .timeout = 180);

Test(ringorder, round_robin_hosts_get_a_two_crossing_ring_and_right_results)
{
    cr_assert_eq(mp_run(4, interleaved, NULL, 150), 0);
    cr_assert_eq(mp_run(6, interleaved, NULL, 150), 0);
}

typedef struct {
    int hosts, numas, channels;
} numa_layout_t;

/* Launcher numbering: host = rank % hosts, NUMA node = (rank / hosts) % numas, so both
 * interleave; the NUMA ids are offset per host (ids are only compared within a host). */
static int fake_numa(const numa_layout_t *l, int r)
{
    return (r / l->hosts) % l->numas + 10 * (r % l->hosts);
}

static int numa_ring(braid_comm_t comm, int rank, int n, void *arg)
{
    const numa_layout_t *l = arg;
    char id[16];
    snprintf(id, sizeof(id), "%d", fake_numa(l, rank));
    char nch[16];
    snprintf(nch, sizeof(nch), "%d", l->channels);
    setenv("BRAID_NUMA_ID", id, 1);
    setenv("BRAID_NCHANNELS", nch, 1);
    braid_comm_t sub = mp_fake_host_comm(comm, rank, rank % l->hosts, "ring");
    unsetenv("BRAID_NUMA_ID");
    unsetenv("BRAID_NCHANNELS");
    MP_CHECK(rank, sub, "split");
    /* Every channel's connections follow the ring order. */
    MP_CHECK(rank, sub->nchannels == l->channels, "%d channels", sub->nchannels);
    int pos = -1;
    for (int q = 0; q < n; q++)
        if (sub->ring_order[q] == rank) pos = q;
    MP_CHECK(rank, pos >= 0, "rank not on the ring");
    for (int ch = 0; ch < l->channels; ch++)
        MP_CHECK(rank,
                 sub->ring[ch].next == sub->ring_order[(pos + 1) % n] &&
                     sub->ring[ch].prev == sub->ring_order[(pos + n - 1) % n],
                 "channel %d: prev %d next %d", ch, sub->ring[ch].prev, sub->ring[ch].next);
    for (int r = 0; r < n; r++)
        MP_CHECK(
            rank, sub->peers[r].place.numa == fake_numa(l, r) && sub->peers[r].place.numa_forced,
            "rank %d published NUMA node %d, set %d", r, sub->peers[r].place.numa, fake_numa(l, r));
    /* Counted here from the layout, independently of topo.c. */
    int hx = 0, nx = 0, distinct = 0;
    for (int q = 0; q < n; q++) {
        int a = sub->ring_order[q], b = sub->ring_order[(q + 1) % n];
        hx += a % l->hosts != b % l->hosts;
        nx += a % l->hosts == b % l->hosts && fake_numa(l, a) != fake_numa(l, b);
    }
    for (int h = 0; h < l->hosts; h++) {
        int seen[8] = {0};
        for (int r = h; r < n; r += l->hosts)
            distinct += !seen[fake_numa(l, r) % 10]++;
    }
    int fewest = l->hosts > 1 ? distinct - l->hosts : (distinct > 1 ? distinct : 0);
    MP_CHECK(rank, hx == (l->hosts > 1 ? l->hosts : 0), "ring crosses hosts %d times", hx);
    MP_CHECK(rank, nx == fewest, "ring crosses NUMA nodes %d times, fewest %d", nx, fewest);
    if (data_check_allreduce(sub, rank, n, BRAID_FLOAT32, BRAID_SUM, 1001, 0, 0, 3, "numa ring"))
        return 1;
    MP_OK(rank, braid_comm_destroy(sub));
    return 0;
}

Test(ringorder, fake_numa_nodes_are_published_and_crossed_the_fewest_times)
{
    numa_layout_t a = {.hosts = 2, .numas = 2, .channels = 2},
                  b = {.hosts = 1, .numas = 3, .channels = 1},
                  c = {.hosts = 3, .numas = 2, .channels = 3};
    cr_assert_eq(mp_run(8, numa_ring, &a, 150), 0, "2 hosts x 2 NUMA nodes x 2 ranks");
    cr_assert_eq(mp_run(6, numa_ring, &b, 150), 0, "1 host x 3 NUMA nodes x 2 ranks");
    cr_assert_eq(mp_run(6, numa_ring, &c, 150), 0, "3 hosts x 2 NUMA nodes x 1 rank");
}
