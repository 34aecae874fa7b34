/* Which NIC a rank's data listener uses. Like NCCL, on a host with several usable NICs each
 * rank takes one on its own NUMA node (its cpu binding), spread over them by local rank, and
 * when none is on its node spreads over all of them by local rank; with one usable NIC (or
 * none) the listener stays on the address that routes to the bootstrap root, as before.
 * BRAID_SOCKET_IFNAME / BRAID_IB_HCA pin the interface and skip all of this (comm.c).
 *
 * A NIC is usable when it has an address of the root route's family from which every other
 * host is reachable: each rank publishes its host's addresses (braid_topo_addrs_collect) at
 * init, and every other host must have an address in the NIC's subnet. The choice is a pure
 * function of the published data (braid_topo_nic_choose), unit-tested without a network.
 *
 * rdma (BRAID_IB_HCA unset) makes the same choice among the NICs that are the interface of an
 * active RDMA port (braid_topo_nic_filter, fed by transport/rdma_dev.c), so a rank listens on
 * the RDMA device of its own NUMA node, like NCCL without NCCL_IB_HCA. */
#include "core/log.h"
#include "topo/topo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

braid_result_t braid_topo_nic_hook_parse(const char *s, braid_topo_dev_t *devs, int *n_p)
{
    int n = 0;
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *colon = memchr(s, ':', len);
        char num[16];
        size_t nl = colon ? len - (size_t)(colon - s) - 1 : 0;
        long v = -2;
        char *e = NULL;
        if (colon && nl > 0 && nl < sizeof(num)) {
            memcpy(num, colon + 1, nl);
            num[nl] = '\0';
            errno = 0;
            v = strtol(num, &e, 10);
            if (errno || *e) v = -2;
        }
        size_t namelen = colon ? (size_t)(colon - s) : 0;
        if (!colon || namelen == 0 || namelen >= 16 || v < -1 || v > 1 << 20)
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "BRAID_NIC_NUMA: entry '%.*s' is not interface:numa_node "
                                   "(a name of 1..15 characters, a node number or -1)",
                                   (int)len, s);
        if (n >= BRAID_TOPO_MAX_DEVS)
            return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_NIC_NUMA: more than %d entries",
                                   BRAID_TOPO_MAX_DEVS);
        braid_topo_dev_t *d = &devs[n++];
        memset(d, 0, sizeof(*d));
        memcpy(d->name, s, namelen);
        d->numa = (int)v;
        d->local = -1;
        s += len + (end ? 1 : 0);
    }
    *n_p = n;
    return BRAID_SUCCESS;
}

static int prefix_len(const struct sockaddr *mask)
{
    if (!mask) return -1;
    const uint8_t *b;
    int bytes;
    if (mask->sa_family == AF_INET) {
        b = (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr;
        bytes = 4;
    } else if (mask->sa_family == AF_INET6) {
        b = (const uint8_t *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
        bytes = 16;
    } else {
        return -1;
    }
    int n = 0;
    for (int i = 0; i < bytes; i++)
        for (int k = 7; k >= 0; k--)
            n += (b[i] >> k) & 1;
    return n;
}

void braid_topo_addrs_collect(braid_topo_addrs_t *out)
{
    memset(out, 0, sizeof(*out));
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list)) return;
    for (const struct ifaddrs *ifa = list; ifa && out->n < BRAID_TOPO_MAX_ADDRS;
         ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
            continue;
        if (!strncmp(ifa->ifa_name, "docker", 6) || !strncmp(ifa->ifa_name, "virbr", 5)) continue;
        int fam = ifa->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
        if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
        int plen = prefix_len(ifa->ifa_netmask);
        braid_topo_ifaddr_t *a = &out->a[out->n++];
        snprintf(a->ifname, sizeof(a->ifname), "%.15s", ifa->ifa_name);
        a->family = (uint8_t)fam;
        if (fam == AF_INET) {
            memcpy(a->addr, &((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr, 4);
            a->prefix = (uint8_t)(plen < 0 ? 32 : plen);
        } else {
            memcpy(a->addr, &in6->sin6_addr, 16);
            a->prefix = (uint8_t)(plen < 0 ? 128 : plen);
        }
    }
    freeifaddrs(list);
}

int braid_topo_addr_same_subnet(const braid_topo_ifaddr_t *a, const braid_topo_ifaddr_t *b,
                                int prefix)
{
    if (a->family != b->family || (a->family != AF_INET && a->family != AF_INET6)) return 0;
    int bits = a->family == AF_INET ? 32 : 128;
    if (prefix < 0 || prefix > bits) prefix = bits;
    int full = prefix / 8, rest = prefix % 8;
    if (memcmp(a->addr, b->addr, (size_t)full)) return 0;
    if (!rest) return 1;
    uint8_t m = (uint8_t)(0xff << (8 - rest));
    return (a->addr[full] & m) == (b->addr[full] & m);
}

/* The index in mine of the NIC's first address of family, or -1. */
static int nic_addr(const braid_topo_addrs_t *mine, const char *name, int family)
{
    for (int i = 0; i < mine->n && i < BRAID_TOPO_MAX_ADDRS; i++)
        if (mine->a[i].family == family && !strncmp(mine->a[i].ifname, name, 15)) return i;
    return -1;
}

static int reaches_all(const braid_topo_ifaddr_t *a, const braid_topo_addrs_t *const *others,
                       int nothers)
{
    for (int h = 0; h < nothers; h++) {
        int ok = 0;
        for (int i = 0; i < others[h]->n && i < BRAID_TOPO_MAX_ADDRS && !ok; i++)
            ok = braid_topo_addr_same_subnet(a, &others[h]->a[i], a->prefix);
        if (!ok) return 0;
    }
    return 1;
}

int braid_topo_nic_choose(const braid_topo_dev_t *nics, int nnics, const braid_topo_addrs_t *mine,
                          const braid_topo_addrs_t *const *others, int nothers, int family,
                          int my_numa, int local_rank, char *why, size_t len)
{
    char scratch[8];
    if (!why) {
        why = scratch;
        len = sizeof(scratch);
    }
    /* usable NICs (index into nics) in name order; local ones a subsequence of them */
    int usable[BRAID_TOPO_MAX_DEVS], addr[BRAID_TOPO_MAX_DEVS], nu = 0;
    for (int i = 0; i < nnics && i < BRAID_TOPO_MAX_DEVS; i++) {
        int a = nic_addr(mine, nics[i].name, family);
        if (a < 0 || !reaches_all(&mine->a[a], others, nothers)) continue;
        int k = nu++;
        while (k > 0 && strcmp(nics[usable[k - 1]].name, nics[i].name) > 0) {
            usable[k] = usable[k - 1];
            addr[k] = addr[k - 1];
            k--;
        }
        usable[k] = i;
        addr[k] = a;
    }
    if (nu < 2) {
        snprintf(why, len, "%s usable NIC (an address every other host shares a subnet with)",
                 nu ? "one" : "no");
        return -1;
    }
    int local[BRAID_TOPO_MAX_DEVS], nl = 0;
    for (int k = 0; k < nu; k++)
        if (my_numa >= 0 && nics[usable[k]].numa == my_numa) local[nl++] = k;
    int lr = local_rank < 0 ? 0 : local_rank;
    int k = nl ? local[lr % nl] : lr % nu;
    if (nl)
        snprintf(why, len,
                 "%s is on NUMA node %d like this rank; %d of %d usable NICs are, "
                 "local rank %d takes number %d of them",
                 nics[usable[k]].name, my_numa, nl, nu, lr, lr % nl);
    else
        snprintf(why, len,
                 "none of the %d usable NICs is on this rank's NUMA node %d; local "
                 "rank %d takes number %d of them",
                 nu, my_numa, lr, lr % nu);
    return addr[k];
}

int braid_topo_nic_filter(const braid_topo_dev_t *nics, int nnics,
                          const braid_topo_rdma_port_t *ports, int nports, int add_unlisted,
                          braid_topo_dev_t *out)
{
    int n = 0;
    for (int i = 0; i < nnics && n < BRAID_TOPO_MAX_DEVS; i++) {
        int dup = 0, p = 0;
        for (int j = 0; j < n && !dup; j++)
            dup = !strcmp(out[j].name, nics[i].name);
        while (p < nports && (!ports[p].netdev[0] || strncmp(ports[p].netdev, nics[i].name, 15)))
            p++;
        if (dup || p == nports) continue;
        out[n] = nics[i];
        if (ports[p].numa >= 0) out[n].numa = ports[p].numa;
        n++;
    }
    for (int p = 0; add_unlisted && p < nports && n < BRAID_TOPO_MAX_DEVS; p++) {
        int dup = !ports[p].hw || !ports[p].netdev[0];
        for (int j = 0; j < n && !dup; j++)
            dup = !strncmp(out[j].name, ports[p].netdev, 15);
        if (dup) continue;
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].name, sizeof(out[n].name), "%.15s", ports[p].netdev);
        out[n].numa = ports[p].numa;
        out[n].local = -1;
        n++;
    }
    return n;
}
