/* Topology-aware ring order with real processes: ranks numbered round-robin across two fake
 * hosts (BRAID_HOSTNAME, then a split re-reads the host identities), so rank order would cross
 * hosts at every edge; the ring must cross each host boundary once and every ring collective
 * must still give each rank its own result. */
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
