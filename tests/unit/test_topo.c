/* Topology without processes: host grouping from host id strings, and the ring order checked on
 * shuffled rank-to-host maps (1..4 hosts, uneven ranks per host, NUMA ids, up to 16 ranks):
 * a permutation, each host contiguous (the ring crosses each host boundary once), NUMA nodes
 * contiguous within a host, hosts in order of their lowest rank, deterministic. Plus a smoke
 * test of hardware discovery. */
#include "topo/topo.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

TestSuite(topo, .timeout = 30);

Test(topo, group_by_host_id)
{
    const char ids[6][8] = {"b", "a", "b", "c", "a", "b"};
    braid_topo_t t;
    cr_assert_eq(braid_topo_group(6, ids[0], sizeof(ids[0]), &t), BRAID_SUCCESS);
    cr_assert_eq(t.nhosts, 3);
    int host[6] = {0, 1, 0, 2, 1, 0}, local[6] = {0, 0, 1, 0, 1, 2}, size[3] = {3, 2, 1};
    for (int r = 0; r < 6; r++) {
        cr_assert_eq(t.host[r], host[r], "rank %d", r);
        cr_assert_eq(t.local_rank[r], local[r], "rank %d", r);
    }
    for (int h = 0; h < 3; h++)
        cr_assert_eq(t.host_size[h], size[h]);
    cr_assert_eq(t.min_local, 1);
    cr_assert_eq(t.max_local, 3);
    int ranks[6];
    cr_assert_eq(braid_topo_host_ranks(&t, 0, ranks), 3);
    cr_assert(ranks[0] == 0 && ranks[1] == 2 && ranks[2] == 5);
    braid_topo_free(&t);
    cr_assert_eq(braid_topo_group(1, "x", 1, &t), BRAID_SUCCESS);
    cr_assert(t.nhosts == 1 && t.min_local == 1 && t.max_local == 1);
    braid_topo_free(&t);
}

static uint64_t rng_state;
static int rnd(int m)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng_state >> 33) % (uint64_t)m);
}

/* Checks every property of an order; returns a description of the first violation or NULL. */
static const char *check_order(int n, const int *host, const int *numa, const int *order)
{
    static char why[128];
    int seen[64] = {0};
    for (int i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n || seen[order[i]]++) return "not a permutation";
    }
    int hosts = 0;
    int hseen[64] = {0};
    for (int r = 0; r < n; r++)
        hosts += !hseen[host[r]]++;
    int x = braid_topo_ring_crossings(n, host, order);
    if (x != (hosts > 1 ? hosts : 0)) {
        snprintf(why, sizeof(why), "%d host crossings for %d hosts", x, hosts);
        return why;
    }
    /* Contiguous hosts (with crossings == hosts that already holds); host of rank 0 first. */
    if (host[order[0]] != host[0]) return "the host of rank 0 does not come first";
    int lowest_prev = -1;
    for (int i = 0; i < n; i++) {
        int start = i == 0 || host[order[i]] != host[order[i - 1]];
        if (start) {
            int lowest = n;
            for (int r = 0; r < n; r++)
                if (host[r] == host[order[i]] && r < lowest) lowest = r;
            if (lowest <= lowest_prev) return "hosts not in order of their lowest rank";
            lowest_prev = lowest;
            continue;
        }
        int a = order[i - 1], b = order[i];
        int na = numa ? numa[a] : 0, nb = numa ? numa[b] : 0;
        if (na > nb || (na == nb && a > b)) return "within a host not by (numa, rank)";
    }
    return NULL;
}

Test(topo, ring_order_on_shuffled_maps)
{
    rng_state = 12345;
    int cases = 0;
    for (int n = 1; n <= 16; n++)
        for (int nh = 1; nh <= 4; nh++)
            for (int trial = 0; trial < 40; trial++, cases++) {
                int host[16], numa[16], order[16], again[16];
                /* Uneven: random host per rank, host ids arbitrary (not 0..nh-1). */
                for (int r = 0; r < n; r++) {
                    host[r] = 10 * rnd(nh) + 3;
                    numa[r] = rnd(2);
                }
                int *nm = trial % 3 ? numa : NULL;
                cr_assert_eq(braid_topo_ring_order(n, host, nm, order), BRAID_SUCCESS);
                const char *bad = check_order(n, host, nm, order);
                cr_assert_null(bad, "n=%d hosts<=%d trial %d: %s", n, nh, trial, bad);
                cr_assert_eq(braid_topo_ring_order(n, host, nm, again), BRAID_SUCCESS);
                cr_assert_arr_eq(order, again, (size_t)n * sizeof(int), "not deterministic");
            }
    cr_assert_gt(cases, 0);
}

Test(topo, ring_order_examples)
{
    /* Round-robin placement (launcher gave ranks cyclically over 2 hosts). */
    int host[8] = {0, 1, 0, 1, 0, 1, 0, 1}, order[8];
    cr_assert_eq(braid_topo_ring_order(8, host, NULL, order), BRAID_SUCCESS);
    int want[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    cr_assert_arr_eq(order, want, sizeof(want));
    int identity[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    cr_assert_eq(braid_topo_ring_crossings(8, host, identity), 8, "the rank-order ring");
    cr_assert_eq(braid_topo_ring_crossings(8, host, order), 2);
    /* NUMA nodes within one host: 1 0 1 0 -> ranks on node 0 first. */
    int one[4] = {7, 7, 7, 7}, numa[4] = {1, 0, 1, 0};
    cr_assert_eq(braid_topo_ring_order(4, one, numa, order), BRAID_SUCCESS);
    int want2[4] = {1, 3, 0, 2};
    cr_assert_arr_eq(order, want2, sizeof(want2));
}

Test(topo, discover_local_machine)
{
    braid_topo_hw_t hw;
    braid_topo_discover(&hw);
    cr_assert_not_null(hw.source);
    cr_assert_geq(hw.npus, 1);
    cr_assert_geq(hw.ncores, 1);
    cr_assert_geq(hw.nnuma, 1);
    cr_assert_leq(hw.nnics, BRAID_TOPO_MAX_DEVS);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    braid_topo_hw_print(&hw, f);
    fclose(f);
    cr_assert(strstr(text, "topology (") && strstr(text, "braid moves no rank"), "%s", text);
    free(text);
}

/* Independent reference for the NUMA part: over every ring of n <= 7 ranks (all orders of
 * positions 1..n-1 after rank 0: a ring's rotation does not matter) that crosses each host
 * boundary once, the fewest NUMA crossings. */
typedef struct {
    int n, hosts, best, rings;
    const int *host, *numa;
    int perm[8], used[8];
} brute_t;

static void brute_rec(brute_t *b, int pos)
{
    if (pos == b->n) {
        b->rings++;
        if (braid_topo_ring_crossings(b->n, b->host, b->perm) != (b->hosts > 1 ? b->hosts : 0))
            return;
        int x = braid_topo_ring_numa_crossings(b->n, b->host, b->numa, b->perm);
        if (x < b->best) b->best = x;
        return;
    }
    for (int r = 1; r < b->n; r++) {
        if (b->used[r]) continue;
        b->used[r] = 1;
        b->perm[pos] = r;
        brute_rec(b, pos + 1);
        b->used[r] = 0;
    }
}

static int brute_min_numa(int n, const int *host, const int *numa, int hosts)
{
    brute_t b = {.n = n, .hosts = hosts, .best = 1 << 30, .host = host, .numa = numa};
    b.perm[0] = 0;
    brute_rec(&b, 1);
    int fact = 1;
    for (int i = 2; i < n; i++)
        fact *= i;
    cr_assert_eq(b.rings, fact, "enumerated %d rings of %d ranks", b.rings, n);
    return b.best;
}

Test(topo, ring_order_crosses_numa_nodes_the_fewest_times)
{
    rng_state = 777;
    for (int n = 1; n <= 16; n++)
        for (int nh = 1; nh <= 3; nh++)
            for (int trial = 0; trial < 30; trial++) {
                int host[16], numa[16], order[16], hseen[64] = {0}, hosts = 0;
                for (int r = 0; r < n; r++) {
                    host[r] = 7 * rnd(nh) + 1;
                    numa[r] = rnd(3) - (trial % 5 == 0); /* some -1 (unknown) */
                    hosts += !hseen[host[r]]++;
                }
                cr_assert_eq(braid_topo_ring_order(n, host, numa, order), BRAID_SUCCESS);
                int x = braid_topo_ring_numa_crossings(n, host, numa, order);
                int want = braid_topo_min_numa_crossings(n, host, numa);
                cr_assert_eq(x, want, "n=%d hosts=%d trial %d: %d NUMA crossings, fewest %d", n,
                             hosts, trial, x, want);
                cr_assert_eq(braid_topo_ring_crossings(n, host, order), hosts > 1 ? hosts : 0);
                if (n <= 7)
                    cr_assert_eq(want, brute_min_numa(n, host, numa, hosts),
                                 "n=%d trial %d: formula vs exhaustive search", n, trial);
            }
}

Test(topo, ring_order_numa_example)
{
    /* 2 hosts x 2 NUMA nodes x 2 ranks, numbered round-robin over hosts and then NUMA nodes:
     * rank-order ring crosses hosts 8 times; ours twice and NUMA nodes once per host. */
    int host[8] = {0, 1, 0, 1, 0, 1, 0, 1}, numa[8] = {0, 0, 1, 1, 0, 0, 1, 1}, order[8];
    cr_assert_eq(braid_topo_ring_order(8, host, numa, order), BRAID_SUCCESS);
    int want[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    cr_assert_arr_eq(order, want, sizeof(want));
    cr_assert_eq(braid_topo_ring_crossings(8, host, order), 2);
    cr_assert_eq(braid_topo_ring_numa_crossings(8, host, numa, order), 2);
    int identity[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    cr_assert_eq(braid_topo_ring_numa_crossings(8, host, numa, identity), 0, "no same-host edge");
    int one[4] = {0, 0, 0, 0}, nm[4] = {1, 0, 1, 0};
    cr_assert_eq(braid_topo_ring_order(4, one, nm, order), BRAID_SUCCESS);
    cr_assert_eq(braid_topo_ring_numa_crossings(4, one, nm, order), 2, "a lone host closes");
    cr_assert_eq(braid_topo_min_numa_crossings(4, one, nm), 2);
    cr_assert_eq(braid_topo_min_numa_crossings(4, one, NULL), 0);
}

static void set_of(cpu_set_t *s, int a, int b)
{
    CPU_ZERO(s);
    for (int c = a; c <= b; c++)
        CPU_SET(c, s);
}

Test(topo, locate_in_a_fake_two_node_machine)
{
    braid_topo_hw_t hw;
    memset(&hw, 0, sizeof(hw));
    hw.source = "test";
    hw.nnuma = hw.nnode_sets = 2;
    hw.node_id[0] = 0;
    hw.node_id[1] = 1;
    set_of(&hw.node_cpus[0], 0, 3);
    set_of(&hw.node_cpus[1], 4, 7);
    hw.nnics = 2;
    hw.nic[0] = (braid_topo_dev_t){.name = "eth0", .numa = 0};
    hw.nic[1] = (braid_topo_dev_t){.name = "ib1", .numa = 1};
    hw.ngpus = 1;
    hw.gpu[0] = (braid_topo_dev_t){.name = "0000:81:00.0", .numa = -1};
    cpu_set_t s, out;
    set_of(&s, 5, 5);
    braid_topo_locate(&hw, &s);
    cr_assert_eq(hw.my_numa, 1);
    cr_assert(hw.nic[0].local == 0 && hw.nic[1].local == 1 && hw.gpu[0].local == -1);
    braid_topo_numa_cpus(&hw, &s, &out);
    char list[64];
    braid_topo_cpulist(&out, list, sizeof(list));
    cr_assert_str_eq(list, "4-7");
    set_of(&s, 3, 4);
    braid_topo_locate(&hw, &s);
    cr_assert_eq(hw.my_numa, -1, "cpus on two nodes");
    cr_assert(hw.nic[0].local == -1 && hw.nic[1].local == -1);
    braid_topo_numa_cpus(&hw, &s, &out);
    braid_topo_cpulist(&out, list, sizeof(list));
    cr_assert_str_eq(list, "0-7");
    set_of(&s, 0, 3);
    CPU_SET(8, &s);
    CPU_SET(10, &s);
    CPU_SET(11, &s);
    braid_topo_cpulist(&s, list, sizeof(list));
    cr_assert_str_eq(list, "0-3,8,10-11");
    CPU_ZERO(&s);
    braid_topo_cpulist(&s, list, sizeof(list));
    cr_assert_str_eq(list, "none");
    /* One node: everything is on it, whatever the devices report. */
    hw.nnuma = hw.nnode_sets = 1;
    set_of(&hw.node_cpus[0], 0, 7);
    set_of(&s, 2, 2);
    braid_topo_locate(&hw, &s);
    cr_assert(hw.my_numa == 0 && hw.gpu[0].local == 1 && hw.nic[1].local == 1);
}

Test(topo, place_publishes_the_binding_or_the_override)
{
    cpu_set_t s;
    cr_assert_eq(sched_getaffinity(0, sizeof(s), &s), 0);
    braid_topo_hw_t hw;
    braid_topo_discover(&hw);
    braid_topo_place_t p;
    unsetenv("BRAID_NUMA_ID");
    cr_assert_eq(braid_topo_place(&s, &p), BRAID_SUCCESS);
    cr_assert_eq(p.numa, hw.my_numa);
    cr_assert_eq(p.numa_forced, 0);
    cr_assert_leq(p.nnics, BRAID_TOPO_PEER_DEVS);
    for (int i = 0; i < p.nnics; i++) { /* each published NIC is one hw found local */
        int found = 0;
        for (int j = 0; j < hw.nnics; j++)
            found |= !strcmp(hw.nic[j].name, p.nic[i]) && hw.nic[j].local != 0;
        cr_assert(found, "NIC %s", p.nic[i]);
    }
    setenv("BRAID_NUMA_ID", "3", 1);
    cr_assert_eq(braid_topo_place(&s, &p), BRAID_SUCCESS);
    cr_assert(p.numa == 3 && p.numa_forced == 1);
    setenv("BRAID_NUMA_ID", "two", 1);
    cr_assert_eq(braid_topo_place(&s, &p), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "BRAID_NUMA_ID"), "%s", braid_last_error());
    unsetenv("BRAID_NUMA_ID");
}

/* Kernel cpu lists: parsed into a set (up to a newline, as in /proc status lines) and written
 * back in the same canonical form; the set's members checked one by one. */
Test(topo, cpulist_parse_and_format_round_trip)
{
    const char *in[] = {"0", "0-3,8,10-11\n", "5,7-9", "1-1", ""};
    const char *out[] = {"0", "0-3,8,10-11", "5,7-9", "1", "none"};
    for (int i = 0; i < 5; i++) {
        cpu_set_t s;
        braid_topo_cpulist_parse(in[i], &s);
        char buf[64];
        braid_topo_cpulist(&s, buf, sizeof(buf));
        cr_assert_str_eq(buf, out[i], "'%s'", in[i]);
    }
    cpu_set_t s;
    braid_topo_cpulist_parse("2-4,9\n12", &s);
    cr_assert_eq(CPU_COUNT(&s), 4, "the newline ends the list");
    for (int c = 0; c < 16; c++)
        cr_assert_eq(!!CPU_ISSET(c, &s), c == 2 || c == 3 || c == 4 || c == 9, "cpu %d", c);
}
