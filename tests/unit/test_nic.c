/* The NIC choice for a rank's data listener (topo/nic.c), without a network: hosts described
 * as address lists, the choice checked against the rule written out independently here
 * (usable = an address of the family whose subnet every other host has an address in; two or
 * more usable: the rank's NUMA node first, spread by local rank, names in order), plus the
 * subnet test and the BRAID_NIC_NUMA parser. */
#include "topo/topo.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <string.h>
#include <sys/socket.h>

TestSuite(nic, .timeout = 30);

static void add(braid_topo_addrs_t *l, const char *ifname, const char *ip, int prefix)
{
    braid_topo_ifaddr_t *a = &l->a[l->n++];
    memset(a, 0, sizeof(*a));
    snprintf(a->ifname, sizeof(a->ifname), "%s", ifname);
    a->family = strchr(ip, ':') ? AF_INET6 : AF_INET;
    a->prefix = (uint8_t)prefix;
    cr_assert_eq(inet_pton(a->family, ip, a->addr), 1, "%s", ip);
}

static braid_topo_dev_t nic(const char *name, int numa)
{
    braid_topo_dev_t d = {.numa = numa, .local = -1};
    snprintf(d.name, sizeof(d.name), "%s", name);
    return d;
}

Test(nic, same_subnet)
{
    braid_topo_addrs_t l = {0};
    add(&l, "a", "198.18.0.1", 24);
    add(&l, "b", "198.18.0.200", 24);
    add(&l, "c", "198.19.0.1", 24);
    add(&l, "d", "fd00::1", 64);
    add(&l, "e", "fd00::ffff:1", 64);
    add(&l, "f", "198.18.0.129", 25);
    cr_assert(braid_topo_addr_same_subnet(&l.a[0], &l.a[1], 24));
    cr_assert(!braid_topo_addr_same_subnet(&l.a[0], &l.a[2], 24));
    cr_assert(braid_topo_addr_same_subnet(&l.a[0], &l.a[2], 15)); /* 198.18.0.0/15 */
    cr_assert(!braid_topo_addr_same_subnet(&l.a[0], &l.a[2], 16));
    cr_assert(!braid_topo_addr_same_subnet(&l.a[0], &l.a[5], 25)); /* .1 vs .129 in /25 */
    cr_assert(braid_topo_addr_same_subnet(&l.a[1], &l.a[5], 25));
    cr_assert(braid_topo_addr_same_subnet(&l.a[3], &l.a[4], 64));
    cr_assert(!braid_topo_addr_same_subnet(&l.a[3], &l.a[4], 112));
    cr_assert(!braid_topo_addr_same_subnet(&l.a[0], &l.a[3], 0)); /* families differ */
}

/* Two hosts with two rails each (198.18.0.x and 198.19.0.x), NICs on NUMA nodes 0 and 1. */
static braid_topo_addrs_t me_, other_;
static const braid_topo_addrs_t *others_[1] = {&other_};
static braid_topo_dev_t nics_[3];

static void two_rails(void)
{
    memset(&me_, 0, sizeof(me_));
    memset(&other_, 0, sizeof(other_));
    /* Listed out of name order: the choice goes by name, not discovery order. */
    add(&me_, "eth1", "198.19.0.1", 24);
    add(&me_, "eth0", "198.18.0.1", 24);
    add(&me_, "mgmt", "10.9.9.1", 24); /* no NIC behind it in nics_ */
    add(&other_, "eth0", "198.18.0.2", 24);
    add(&other_, "eth1", "198.19.0.2", 24);
    nics_[0] = nic("eth1", 1);
    nics_[1] = nic("eth0", 0);
    nics_[2] = nic("eth2", 0); /* no address: unusable */
}

static const char *chosen(int k)
{
    return k < 0 ? "(route)" : me_.a[k].ifname;
}

Test(nic, local_numa_node_first)
{
    two_rails();
    char why[200];
    for (int lr = 0; lr < 4; lr++) {
        int k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET, 0, lr, why, sizeof(why));
        cr_assert_str_eq(chosen(k), "eth0", "numa 0, local rank %d: %s", lr, why);
        k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET, 1, lr, why, sizeof(why));
        cr_assert_str_eq(chosen(k), "eth1", "numa 1, local rank %d: %s", lr, why);
        cr_assert(strstr(why, "NUMA node 1"), "%s", why);
    }
}

Test(nic, no_local_nic_spreads_by_local_rank)
{
    two_rails();
    char why[200];
    const char *want[] = {"eth0", "eth1", "eth0", "eth1"}; /* usable in name order */
    for (int lr = 0; lr < 4; lr++) {
        for (int numa = -1; numa <= 5; numa += 6) { /* unknown, and a node without NICs */
            int k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET, numa, lr, why,
                                          sizeof(why));
            cr_assert_str_eq(chosen(k), want[lr], "numa %d, local rank %d: %s", numa, lr, why);
            cr_assert(strstr(why, "none of the 2"), "%s", why);
        }
    }
    /* Two NICs on the rank's node: spread over those two only. */
    nics_[0].numa = 0;
    for (int lr = 0; lr < 4; lr++) {
        int k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET, 0, lr, NULL, 0);
        cr_assert_str_eq(chosen(k), want[lr], "local rank %d", lr);
    }
}

Test(nic, one_usable_nic_keeps_the_route)
{
    two_rails();
    char why[200];
    /* The other host lacks the 198.19 rail: eth1 cannot reach it. */
    other_.n = 1;
    int k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET, 1, 1, why, sizeof(why));
    cr_assert_eq(k, -1, "%s", chosen(k));
    cr_assert(strstr(why, "one usable NIC"), "%s", why);
    /* Single-NIC host. */
    two_rails();
    k = braid_topo_nic_choose(&nics_[1], 1, &me_, others_, 1, AF_INET, 0, 0, why, sizeof(why));
    cr_assert_eq(k, -1);
    /* No NIC has an address of the root route's family. */
    k = braid_topo_nic_choose(nics_, 3, &me_, others_, 1, AF_INET6, 0, 0, why, sizeof(why));
    cr_assert_eq(k, -1);
    cr_assert(strstr(why, "no usable NIC"), "%s", why);
    /* A third host on only one rail makes the other rail unusable for everyone. */
    braid_topo_addrs_t third = {0};
    add(&third, "eth0", "198.18.0.3", 24);
    const braid_topo_addrs_t *three[2] = {&other_, &third};
    k = braid_topo_nic_choose(nics_, 3, &me_, three, 2, AF_INET, 1, 0, why, sizeof(why));
    cr_assert_eq(k, -1, "%s", chosen(k));
    add(&third, "eth1", "198.19.0.3", 24);
    k = braid_topo_nic_choose(nics_, 3, &me_, three, 2, AF_INET, 1, 0, why, sizeof(why));
    cr_assert_str_eq(chosen(k), "eth1", "%s", why);
}

Test(nic, ipv6_rails)
{
    braid_topo_addrs_t me = {0}, other = {0};
    const braid_topo_addrs_t *o[1] = {&other};
    add(&me, "ib0", "198.18.0.1", 24); /* IPv4 ignored for an IPv6 root */
    add(&me, "ib0", "fd00:0:0:1::1", 64);
    add(&me, "ib1", "fd00:0:0:2::1", 64);
    add(&other, "ib0", "fd00:0:0:1::2", 64);
    add(&other, "ib1", "fd00:0:0:2::2", 64);
    braid_topo_dev_t n[2] = {nic("ib0", 0), nic("ib1", 1)};
    int k = braid_topo_nic_choose(n, 2, &me, o, 1, AF_INET6, 1, 0, NULL, 0);
    cr_assert_eq(k, 2);
    k = braid_topo_nic_choose(n, 2, &me, o, 1, AF_INET6, 0, 0, NULL, 0);
    cr_assert_eq(k, 1);
}

Test(nic, hook_parse)
{
    braid_topo_dev_t d[BRAID_TOPO_MAX_DEVS];
    int n = -1;
    cr_assert_eq(braid_topo_nic_hook_parse("", d, &n), BRAID_SUCCESS);
    cr_assert_eq(n, 0);
    cr_assert_eq(braid_topo_nic_hook_parse("eth0:0,eth1:1,ib0:-1", d, &n), BRAID_SUCCESS);
    cr_assert_eq(n, 3);
    cr_assert(!strcmp(d[0].name, "eth0") && d[0].numa == 0);
    cr_assert(!strcmp(d[1].name, "eth1") && d[1].numa == 1);
    cr_assert(!strcmp(d[2].name, "ib0") && d[2].numa == -1);
    const char *bad[] = {
        "eth0", "eth0:", ":1", "eth0:x", "eth0:1,eth1", "eth0:-2", "a_name_too_long_for_it:0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(braid_topo_nic_hook_parse(bad[i], d, &n), BRAID_ERR_INVALID_ARG, "%s", bad[i]);
        cr_assert(strstr(braid_last_error(), "BRAID_NIC_NUMA"), "%s", braid_last_error());
    }
}

Test(nic, collect_local_addresses)
{
    braid_topo_addrs_t l;
    braid_topo_addrs_collect(&l);
    cr_assert(l.n >= 0 && l.n <= BRAID_TOPO_MAX_ADDRS);
    for (int i = 0; i < l.n; i++) {
        cr_assert(l.a[i].family == AF_INET || l.a[i].family == AF_INET6);
        cr_assert(l.a[i].ifname[0] != '\0');
        if (l.a[i].family == AF_INET) cr_assert_neq(l.a[i].addr[0], 127); /* no loopback */
    }
}

/* rdma's NIC list (braid_topo_nic_filter): only interfaces of active RDMA ports, on the RDMA
 * device's NUMA node when sysfs gives one; hardware ports on unlisted interfaces (a bond) join
 * unless the list came from BRAID_NIC_NUMA. Expected lists written out by hand. */
static braid_topo_rdma_port_t rport(const char *dev, const char *netdev, int numa, int hw)
{
    braid_topo_rdma_port_t p = {.port = 1, .numa = numa, .hw = hw};
    snprintf(p.dev, sizeof(p.dev), "%s", dev);
    snprintf(p.netdev, sizeof(p.netdev), "%s", netdev);
    return p;
}

static void expect_nics(const braid_topo_dev_t *got, int n, const char *want)
{
    char s[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(s + strlen(s), sizeof(s) - strlen(s), "%s%s:%d", i ? "," : "", got[i].name,
                 got[i].numa);
    cr_assert_str_eq(s, want);
}

Test(nic, rdma_filter)
{
    braid_topo_dev_t nics[4] = {nic("eth0", 0), nic("eth1", 1), nic("eth2", -1), nic("eth3", 1)};
    braid_topo_dev_t out[BRAID_TOPO_MAX_DEVS];
    /* eth0 has no RDMA port; eth2's device says node 0; mlx5_3 sits on bond0 (unlisted). */
    braid_topo_rdma_port_t ports[] = {rport("mlx5_1", "eth1", -1, 1), rport("mlx5_2", "eth2", 0, 1),
                                      rport("mlx5_3", "bond0", 1, 1), rport("rxe0", "eth1", -1, 0),
                                      rport("rxe9", "veth9", -1, 0),  rport("ib9", "", 0, 1)};
    int n = braid_topo_nic_filter(nics, 4, ports, 6, 1, out);
    expect_nics(out, n, "eth1:1,eth2:0,bond0:1");
    /* BRAID_NIC_NUMA's list (add_unlisted = 0): nothing joins it. */
    n = braid_topo_nic_filter(nics, 4, ports, 6, 0, out);
    expect_nics(out, n, "eth1:1,eth2:0");
    /* No port, or no NIC: nothing. */
    cr_assert_eq(braid_topo_nic_filter(nics, 4, ports, 0, 1, out), 0);
    cr_assert_eq(braid_topo_nic_filter(nics, 0, ports, 2, 0, out), 0);
    /* A listed name twice stays once; the port's node wins over the NIC's. */
    braid_topo_dev_t twice[2] = {nic("eth2", 1), nic("eth2", 1)};
    n = braid_topo_nic_filter(twice, 2, ports, 6, 0, out);
    expect_nics(out, n, "eth2:0");
    /* More ports than the list holds: capped. */
    braid_topo_rdma_port_t many[BRAID_TOPO_MAX_DEVS + 4];
    for (int i = 0; i < BRAID_TOPO_MAX_DEVS + 4; i++) {
        char nd[16];
        snprintf(nd, sizeof(nd), "p%d", i);
        many[i] = rport("mlx5_x", nd, i % 2, 1);
    }
    cr_assert_eq(braid_topo_nic_filter(nics, 4, many, BRAID_TOPO_MAX_DEVS + 4, 1, out),
                 BRAID_TOPO_MAX_DEVS);
}

/* The filtered list through braid_topo_nic_choose: tcp would take eth0 (NUMA node 0, no RDMA),
 * rdma takes the RDMA NIC of the rank's node, and with one RDMA NIC keeps the route. */
Test(nic, rdma_choice_among_rdma_nics)
{
    braid_topo_addrs_t me = {0}, other = {0};
    const braid_topo_addrs_t *o[1] = {&other};
    const char *rails[3][3] = {{"eth0", "198.18.0.1", "198.18.0.2"},
                               {"eth1", "198.19.0.1", "198.19.0.2"},
                               {"eth2", "198.20.0.1", "198.20.0.2"}};
    for (int i = 0; i < 3; i++) {
        add(&me, rails[i][0], rails[i][1], 24);
        add(&other, rails[i][0], rails[i][2], 24);
    }
    braid_topo_dev_t nics[3] = {nic("eth0", 0), nic("eth1", 0), nic("eth2", 1)};
    braid_topo_rdma_port_t ports[2] = {rport("mlx5_0", "eth1", -1, 1),
                                       rport("mlx5_1", "eth2", -1, 1)};
    braid_topo_dev_t f[BRAID_TOPO_MAX_DEVS];
    int nf = braid_topo_nic_filter(nics, 3, ports, 2, 1, f);
    char why[200];
    const char *want[2][2] = {{"eth1", "eth1"}, {"eth2", "eth2"}}; /* [numa][local rank] */
    for (int numa = 0; numa < 2; numa++)
        for (int lr = 0; lr < 2; lr++) {
            int k = braid_topo_nic_choose(f, nf, &me, o, 1, AF_INET, numa, lr, why, sizeof(why));
            cr_assert(k >= 0, "%s", why);
            cr_assert_str_eq(me.a[k].ifname, want[numa][lr], "numa %d lr %d: %s", numa, lr, why);
        }
    int k = braid_topo_nic_choose(nics, 3, &me, o, 1, AF_INET, 0, 0, NULL, 0);
    cr_assert_str_eq(me.a[k].ifname, "eth0"); /* tcp's choice differs */
    /* No NUMA match: spread over the RDMA NICs only (eth1, eth2), by local rank. */
    for (int lr = 0; lr < 4; lr++) {
        k = braid_topo_nic_choose(f, nf, &me, o, 1, AF_INET, 7, lr, why, sizeof(why));
        cr_assert_str_eq(me.a[k].ifname, lr % 2 ? "eth2" : "eth1", "%s", why);
    }
    nf = braid_topo_nic_filter(nics, 3, ports, 1, 1, f);
    k = braid_topo_nic_choose(f, nf, &me, o, 1, AF_INET, 0, 0, why, sizeof(why));
    cr_assert_eq(k, -1, "one RDMA NIC keeps the route: %s", why);
}
