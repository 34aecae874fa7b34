/* Cost-model terms without processes: which recursive-doubling rounds stay within a host, the
 * NIC shared by a host's ranks, how a network's byte time composes with the latency path
 * (serialized vs absorbed by the link's queue), and the net_overlap tuning key. */
#include "algos/algo.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(model, .timeout = 30);

static braid_model_t model_for(int n, const int *host)
{
    char ids[16][8];
    for (int r = 0; r < n; r++)
        snprintf(ids[r], sizeof(ids[r]), "h%d", host[r]);
    braid_topo_t t;
    cr_assert_eq(braid_topo_group(n, ids[0], sizeof(ids[0]), &t), BRAID_SUCCESS);
    braid_model_t m;
    braid_model_init(&m, &t);
    braid_topo_free(&t);
    return m;
}

/* Reference: round i pairs q with q xor 2^i (q < P), the fix-up pairs e with e - P (counted as
 * two rounds); a round is within hosts when every pair is. */
static int ref_intra_rounds(int n, const int *host)
{
    int P = 1;
    while (P * 2 <= n)
        P *= 2;
    int k = 0;
    for (int i = 1; i < P; i <<= 1) {
        int ok = 1;
        for (int q = 0; q < P; q++)
            if (host[q] != host[q ^ i]) ok = 0;
        k += ok;
    }
    int ok = 1;
    for (int e = P; e < n; e++)
        if (host[e] != host[e - P]) ok = 0;
    return k + (P < n && ok ? 2 : 0);
}

Test(model, recdbl_rounds_within_hosts)
{
    struct {
        int n, host[8], want;
    } cases[] = {
        {4, {0, 0, 1, 1}, 1}, /* block 2 x 2: the first round stays in the host */
        {4, {0, 1, 0, 1}, 1}, /* cyclic 2 x 2: the second round does */
        {8, {0}, 3},          /* one host: every round */
        {8, {0, 0, 1, 1, 2, 2, 3, 3}, 1},
        {8, {0, 0, 0, 0, 1, 1, 1, 1}, 2},
        {6, {0, 0, 0, 1, 1, 1}, 0}, /* no round stays within a host */
        {6, {0, 1, 0, 1, 0, 1}, 3}, /* bit 2 (0-2, 1-3) and the fix-up (4-0, 5-1) */
        {3, {0, 0, 0}, 3},          /* one host, fix-up included */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        braid_model_t m = model_for(cases[i].n, cases[i].host);
        int ref = ref_intra_rounds(cases[i].n, cases[i].host);
        cr_assert_eq(ref, cases[i].want, "case %zu: the reference gives %d", i, ref);
        cr_assert_eq(m.recdbl_intra_rounds, ref, "case %zu: %d rounds within hosts, want %d", i,
                     m.recdbl_intra_rounds, ref);
    }
}

/* A 2 x 2 model whose local links are free, so the time is latency + network bytes only. */
static braid_model_t two_by_two(void)
{
    int host[4] = {0, 0, 1, 1};
    braid_model_t m = model_for(4, host);
    m.intra = (braid_link_model_t){1.0, 1e9};
    m.inter = (braid_link_model_t){10.0, 0.125};
    m.launch_us = 2.0;
    m.cores = 0;
    return m;
}

Test(model, recdbl_network_round_carries_every_local_ranks_message)
{
    braid_model_t m = two_by_two();
    size_t S = 4096;
    /* one round within the host (1 us), one over the network (10 us) where both ranks of a
     * host send S through its NIC: 2 S / 0.125 GB/s */
    double want = 2.0 + 1.0 + 10.0 + 2.0 * S / 0.125e3;
    double got = braid_model_time(BRAID_ALGO_RECDBL, BRAID_COLL_ALLREDUCE, S, S / 4, &m);
    cr_assert(fabs(got - want) < 1e-6, "recdbl 2 x 2 at %zu B: %.3f us, want %.3f", S, got, want);
}

Test(model, overlapping_network_takes_the_larger_part)
{
    braid_model_t m = two_by_two();
    m.p2p_chunk = (size_t)1 << 30; /* one message per round: latency independent of size */
    int algos[] = {BRAID_ALGO_RING, BRAID_ALGO_RECDBL, BRAID_ALGO_HIER};
    for (size_t a = 0; a < 3; a++) {
        braid_model_t free_net = m;
        free_net.inter.gbps = 1e12;
        free_net.net_overlap = 0;
        double lat = braid_model_time(algos[a], BRAID_COLL_ALLREDUCE, 8, 2, &free_net);
        for (size_t S = 8; S <= ((size_t)1 << 24); S *= 4) {
            m.net_overlap = 0;
            double sum = braid_model_time(algos[a], BRAID_COLL_ALLREDUCE, S, S / 4, &m);
            m.net_overlap = 1;
            double over = braid_model_time(algos[a], BRAID_COLL_ALLREDUCE, S, S / 4, &m);
            /* local links are free: sum = lat + net, overlap = max(lat, net) (hier's stages
             * may change algorithm with the size, so for it only max <= sum <= 2 max) */
            double net = sum - lat, want = lat > net ? lat : net;
            if (algos[a] == BRAID_ALGO_HIER)
                cr_assert(over <= sum + 1e-9 && sum <= 2 * over + 1e-9,
                          "hier at %zu B: overlap %.3f us, serialized %.3f", S, over, sum);
            else
                cr_assert(fabs(over - want) < 1e-6 * sum + 0.1,
                          "%s at %zu B: overlap %.3f us, want max(%.3f, %.3f)",
                          braid_algo_name(algos[a]), S, over, lat, net);
        }
    }
    /* where latency and bytes are equal, overlap halves recursive doubling's estimate and
     * so moves its crossover with hier to larger sizes */
    m.net_overlap = 0;
    int sum_x = 0, over_x = 0;
    for (size_t S = 8; S <= ((size_t)1 << 20); S *= 2)
        if (!sum_x && braid_model_choose(BRAID_COLL_ALLREDUCE, S, S / 4, &m) != BRAID_ALGO_RECDBL)
            sum_x = (int)S;
    m.net_overlap = 1;
    for (size_t S = 8; S <= ((size_t)1 << 20); S *= 2)
        if (!over_x && braid_model_choose(BRAID_COLL_ALLREDUCE, S, S / 4, &m) != BRAID_ALGO_RECDBL)
            over_x = (int)S;
    cr_assert(sum_x > 0 && over_x > sum_x, "recdbl up to %d B serialized, %d B overlapped", sum_x,
              over_x);
}

Test(model, net_overlap_tuning_key)
{
    char path[] = "/tmp/braid-modelXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("net_overlap 1\n", f);
    fclose(f);
    braid_model_t m = two_by_two();
    cr_assert_eq(braid_tuning_read(path, &m), BRAID_SUCCESS, "%s", braid_last_error());
    cr_assert_eq(m.net_overlap, 1.0);
    f = fopen(path, "w");
    fputs("net_overlap -1\n", f);
    fclose(f);
    cr_assert_eq(braid_tuning_read(path, &m), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "net_overlap"), "%s", braid_last_error());
    /* written back by braid_tuning_write */
    char *text = NULL;
    size_t len = 0;
    f = open_memstream(&text, &len);
    braid_tuning_write(f, &m, "x");
    fclose(f);
    cr_assert(strstr(text, "net_overlap 1\n"), "%s", text);
    free(text);
    unlink(path);
}
