/* RDMA verbs transport: which device, port and address to use (BRAID_IB_HCA in NCCL's grammar,
 * BRAID_IB_GID_INDEX), whether a usable device is there at all, and the listener's address
 * (without BRAID_IB_HCA: tcp's NUMA-local NIC choice among the NICs of active RDMA ports). */
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "transport/rdma_impl.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- devices: BRAID_IB_HCA, BRAID_IB_GID_INDEX ------------------------------------------------
 */

/* NCCL's grammar: a comma list of name[:port]; names match as prefixes, or exactly after a
 * leading '='; a leading '^' excludes the listed devices instead. Empty = every device. */
static int hca_match(const char *spec, const char *dev, int port)
{
    if (!spec || !*spec) return 1;
    int excl = 0, exact = 0, hit = 0;
    if (*spec == '^') excl = 1, spec++;
    if (*spec == '=') exact = 1, spec++;
    while (*spec) {
        size_t n = strcspn(spec, ",");
        char tok[128];
        snprintf(tok, sizeof(tok), "%.*s", (int)(n < sizeof(tok) ? n : sizeof(tok) - 1), spec);
        int tport = -1;
        char *colon = strchr(tok, ':');
        if (colon) {
            *colon = '\0';
            tport = atoi(colon + 1);
        }
        if (*tok && (exact ? !strcmp(tok, dev) : !strncmp(tok, dev, strlen(tok))) &&
            (tport < 0 || tport == port))
            hit = 1;
        spec += n;
        if (*spec == ',') spec++;
    }
    return excl ? !hit : hit;
}

static int gid_is_ipv4(const union ibv_gid *g)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(g->raw, pfx, sizeof(pfx));
}

/* Registered memory and fork() (a PyTorch DataLoader forks workers): on kernels before 5.13 a
 * page of a registered buffer that the parent writes after a fork is copied away from the one
 * the device reads. ibv_fork_init (before any other verbs call; RDMAV_FORK_SAFE=1 does it
 * inside libibverbs) keeps registered ranges out of children; newer kernels need none. */
static void fork_init_once(void)
{
    int r = ibv_fork_init();
    enum ibv_fork_status st = ibv_is_fork_initialized();
    if (st == IBV_FORK_DISABLED)
        braid_warn(NET,
                   "rdma: fork() is unsafe with registered memory in this process "
                   "(ibv_fork_init: %s, too late?); set RDMAV_FORK_SAFE=1 before a child "
                   "process is started after braid's first RDMA use",
                   strerror(r));
    else
        braid_debug(NET, "rdma: fork support: %s",
                    st == IBV_FORK_UNNEEDED ? "not needed (the kernel copies on fork)" : "on");
}

void braid_rdma_fork_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fork_init_once);
}

int braid_rdma_pick_ifaddr(const struct ifaddrs *list, const char *name, struct sockaddr_storage *a)
{
    const struct ifaddrs *best = NULL;
    for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || strcmp(i->ifa_name, name)) continue;
        if (i->ifa_addr->sa_family == AF_INET) {
            best = i;
            break;
        }
        if (i->ifa_addr->sa_family == AF_INET6 && !best &&
            !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
            best = i;
    }
    if (!best) return -1;
    memset(a, 0, sizeof(*a));
    memcpy(a, best->ifa_addr,
           best->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                : sizeof(struct sockaddr_in6));
    return 0;
}

/* The address braid_rdma_pick_ifaddr picks on the network interface ifindex. */
static int ifindex_addr(unsigned ifindex, struct sockaddr_storage *a)
{
    char name[IF_NAMESIZE];
    struct ifaddrs *ifs;
    if (!ifindex || !if_indextoname(ifindex, name) || getifaddrs(&ifs)) return -1;
    int r = braid_rdma_pick_ifaddr(ifs, name, a);
    freeifaddrs(ifs);
    return r;
}

/* The address of port `port` of ctx that rdma_cm should bind to: the GID at gid_index (or, when
 * it is negative, a RoCE v2 IPv4 GID first, then any IPv4 GID, then the address of the GID's
 * network interface). -1 if the port has none. */
static int port_addr(struct ibv_context *ctx, int port, int gid_index, int gid_len,
                     struct sockaddr_storage *a, int *gid_p)
{
    int best = -1, best_score = -1;
    struct ibv_gid_entry be;
    for (int g = gid_index >= 0 ? gid_index : 0; g < (gid_index >= 0 ? gid_index + 1 : gid_len);
         g++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)g, &e, 0)) continue;
        int score = gid_is_ipv4(&e.gid) ? (e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 3 : 2)
                                        : (e.ndev_ifindex ? 1 : 0);
        if (score > best_score) best = g, best_score = score, be = e;
    }
    if (best < 0) return -1;
    *gid_p = best;
    if (gid_is_ipv4(&be.gid)) {
        struct sockaddr_in *s = (struct sockaddr_in *)a;
        memset(a, 0, sizeof(*a));
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, be.gid.raw + 12, 4);
        return 0;
    }
    return ifindex_addr(be.ndev_ifindex, a);
}

/* BRAID_IB_GID_INDEX: -1 (the default: any GID with an address) or a GID index. Not read with
 * braid_param_int, which takes non-negative values only and would leave its complaint about
 * -1 as the thread's last error; the environment lint checks the range [-1, 255]. */
static int gid_index_param(void)
{
    char *end = NULL;
    long v = strtol(braid_param_str("IB_GID_INDEX"), &end, 0);
    return end && *end == '\0' && v >= -1 && v <= 255 ? (int)v : -1;
}

/* Walks the active ports BRAID_IB_HCA allows; with want_addr, stops at the first one with an
 * address (BRAID_IB_GID_INDEX picks its GID). 1 if one was found. */
static int find_port(int want_addr, struct sockaddr_storage *a, char *desc, size_t desc_len)
{
    const char *spec = braid_param_str("IB_HCA");
    int gid_index = gid_index_param();
    int n = 0, found = 0;
    braid_rdma_fork_init();
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return 0;
    for (int i = 0; i < n && !found; i++) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) continue;
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) == 0) {
            for (int p = 1; p <= da.phys_port_cnt && !found; p++) {
                struct ibv_port_attr pa;
                if (ibv_query_port(ctx, (uint8_t)p, &pa) || pa.state != IBV_PORT_ACTIVE ||
                    !hca_match(spec, ibv_get_device_name(list[i]), p))
                    continue;
                int gid = -1;
                if (!want_addr) {
                    found = 1;
                } else if (port_addr(ctx, p, gid_index, pa.gid_tbl_len, a, &gid) == 0) {
                    found = 1;
                    snprintf(desc, desc_len, "%s:%d GID %d (%s)", ibv_get_device_name(list[i]), p,
                             gid, pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB");
                }
            }
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return found;
}

static int g_usable;
static pthread_once_t g_usable_once = PTHREAD_ONCE_INIT;

static void check_usable(void)
{
    g_usable = find_port(0, NULL, NULL, 0);
}

/* 1 when BRAID_IB_HCA or BRAID_IB_GID_INDEX chooses the local address (else the interfaces of
 * BRAID_SOCKET_IFNAME or the route to the root do, as for tcp). */
int braid_rdma_hca_chosen(void)
{
    return *braid_param_str("IB_HCA") || strcmp(braid_param_str("IB_GID_INDEX"), "-1");
}

braid_result_t braid_rdma_hca_addr(struct sockaddr_storage *a)
{
    char desc[160] = "";
    if (!find_port(1, a, desc, sizeof(desc)))
        return braid_set_error(
            BRAID_ERR_INVALID_ARG,
            "rdma: no active RDMA port with an address matches BRAID_IB_HCA='%s' "
            "BRAID_IB_GID_INDEX=%s",
            braid_param_str("IB_HCA"), braid_param_str("IB_GID_INDEX"));
    braid_info(NET, "rdma: using %s", desc);
    return BRAID_SUCCESS;
}

int braid_rdma_usable(void)
{
    pthread_once(&g_usable_once, check_usable);
    return g_usable;
}

/* ---- the listener's NIC: several active ports, BRAID_IB_HCA unset ---------------------------- */

static int read_int(const char *path, int dflt)
{
    FILE *f = fopen(path, "r");
    int v = dflt;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = dflt;
        fclose(f);
    }
    return v;
}

/* The network interface of port `port` of dev: that of its first GID with one (RoCE), else
 * the interface of the same PCI device whose dev_port is port - 1, else its first (IPoIB). */
static void port_netdev(struct ibv_context *ctx, const char *dev, int port, int gid_len,
                        char out[16])
{
    char name[IF_NAMESIZE];
    out[0] = '\0';
    for (int g = 0; g < gid_len; g++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)g, &e, 0) || !e.ndev_ifindex ||
            !if_indextoname(e.ndev_ifindex, name))
            continue;
        snprintf(out, 16, "%.15s", name);
        return;
    }
    char path[256];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/device/net", dev);
    DIR *d = opendir(path);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/sys/class/net/%.64s/dev_port", e->d_name);
        int dp = read_int(path, -1);
        if (n++ == 0 || dp == port - 1) snprintf(out, 16, "%.15s", e->d_name);
        if (dp == port - 1) break;
    }
    if (d) closedir(d);
}

/* The active ports BRAID_IB_HCA allows, with their interfaces and NUMA nodes. */
static int scan_ports(braid_topo_rdma_port_t *ports, int max)
{
    const char *spec = braid_param_str("IB_HCA");
    int n = 0, np = 0;
    braid_rdma_fork_init();
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n && np < max; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!ctx) continue;
        char path[256];
        snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/device", name);
        int hw = access(path, F_OK) == 0;
        snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/device/numa_node", name);
        int numa = read_int(path, -1);
        for (int p = 1; !ibv_query_device(ctx, &da) && p <= da.phys_port_cnt && np < max; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) || pa.state != IBV_PORT_ACTIVE ||
                !hca_match(spec, name, p))
                continue;
            braid_topo_rdma_port_t *t = &ports[np++];
            memset(t, 0, sizeof(*t));
            snprintf(t->dev, sizeof(t->dev), "%.31s", name);
            t->port = p;
            t->numa = numa;
            t->hw = hw;
            port_netdev(ctx, name, p, pa.gid_tbl_len, t->netdev);
        }
        ibv_close_device(ctx);
    }
    if (list) ibv_free_device_list(list);
    return np;
}

typedef struct {
    braid_topo_rdma_port_t ports[BRAID_TOPO_MAX_DEVS];
    int nports, nnics, scanned;
} rdma_nics_t;

/* braid_comm_data_addr's filter: only the NICs of active RDMA ports count. */
static int rdma_nic_filter(braid_topo_dev_t *nics, int nnics, int hooked, void *arg)
{
    rdma_nics_t *s = arg;
    braid_topo_dev_t out[BRAID_TOPO_MAX_DEVS];
    s->nports = scan_ports(s->ports, BRAID_TOPO_MAX_DEVS);
    s->nnics = braid_topo_nic_filter(nics, nnics, s->ports, s->nports, !hooked, out);
    s->scanned = 1;
    memcpy(nics, out, (size_t)s->nnics * sizeof(out[0]));
    return s->nnics;
}

/* The address to listen on (port 0): BRAID_IB_HCA's / BRAID_IB_GID_INDEX's port when set;
 * else like tcp's choice (braid_comm_data_addr) among the NICs with an active RDMA port. */
braid_result_t braid_rdma_listen_addr(struct braid_comm *comm, struct sockaddr_storage *a,
                                      char *why, size_t len)
{
    if (braid_rdma_hca_chosen()) {
        snprintf(why, len, "BRAID_IB_HCA='%s' BRAID_IB_GID_INDEX=%s", braid_param_str("IB_HCA"),
                 braid_param_str("IB_GID_INDEX"));
        return braid_rdma_hca_addr(a);
    }
    rdma_nics_t *s = calloc(1, sizeof(*s));
    if (!s) return braid_set_error(BRAID_ERR_NOMEM, "rdma: out of memory choosing a NIC");
    char reason[400];
    socklen_t alen;
    braid_result_t r =
        braid_comm_data_addr_filtered(comm, rdma_nic_filter, s, a, &alen, reason, sizeof(reason));
    if (r == BRAID_SUCCESS && !s->scanned) snprintf(why, len, "%s", reason);
    if (r == BRAID_SUCCESS && s->scanned) {
        /* The port behind the chosen address, when it is one of this host's published ones. */
        const braid_topo_addrs_t *mine = &comm->peers[comm->rank].addrs;
        const uint8_t *ip = a->ss_family == AF_INET
                                ? (const uint8_t *)&((struct sockaddr_in *)a)->sin_addr
                                : (const uint8_t *)&((struct sockaddr_in6 *)a)->sin6_addr;
        const char *ifn = NULL;
        for (int i = 0; i < mine->n && i < BRAID_TOPO_MAX_ADDRS && !ifn; i++)
            if (mine->a[i].family == a->ss_family &&
                !memcmp(mine->a[i].addr, ip, a->ss_family == AF_INET ? 4 : 16))
                ifn = mine->a[i].ifname;
        const braid_topo_rdma_port_t *p = NULL;
        for (int i = 0; ifn && i < s->nports && !p; i++)
            if (!strcmp(s->ports[i].netdev, ifn)) p = &s->ports[i];
        char port[80] = "";
        if (p) snprintf(port, sizeof(port), "%s:%d; ", p->dev, p->port);
        snprintf(why, len, "%sRDMA NICs: %d (active ports: %d); %s", port, s->nnics, s->nports,
                 reason);
    }
    free(s);
    return r;
}

static int mtu_bytes(int m)
{
    return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

braid_result_t braid_rdma_check_mtu(rdma_conn_t *c, struct rdma_cm_id *id)
{
    struct ibv_port_attr pa;
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr ia;
    if (ibv_query_port(id->verbs, id->port_num, &pa))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_query_port(%s:%u): %m",
                               ibv_get_device_name(id->verbs->device), id->port_num);
    if (ibv_query_qp(id->qp, &qa, IBV_QP_PATH_MTU, &ia))
        return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_query_qp(%s): %m", c->desc);
    int route = id->route.num_paths > 0 && id->route.path_rec ? id->route.path_rec->mtu : 0;
    int want = pa.active_mtu;
    if (mtu_bytes(route) && route < want) want = route;
    c->path_mtu = mtu_bytes(qa.path_mtu);
    char rs[32] = "unknown";
    if (mtu_bytes(route)) snprintf(rs, sizeof(rs), "%d", mtu_bytes(route));
    braid_info(NET, "rdma: QP to %s on %s:%u: path MTU %d bytes (port active MTU %d, route MTU %s)",
               c->desc, ibv_get_device_name(id->verbs->device), id->port_num, c->path_mtu,
               mtu_bytes(pa.active_mtu), rs);
    if ((int)qa.path_mtu > want)
        return braid_set_error(BRAID_ERR_SYSTEM,
                               "rdma: the QP to %s has path MTU %d, above min(port %d, route %s)",
                               c->desc, c->path_mtu, mtu_bytes(pa.active_mtu), rs);
    return BRAID_SUCCESS;
}

void braid_rdma_print_devices(FILE *f)
{
    int n = 0;
    braid_rdma_fork_init();
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        fprintf(f, "rdma devices: none (no verbs device on this host)\n");
        if (list) ibv_free_device_list(list);
        return;
    }
    int gid_index = gid_index_param();
    const char *spec = braid_param_str("IB_HCA");
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!ctx || ibv_query_device(ctx, &da)) {
            fprintf(f, "rdma device %s: cannot be opened\n", name);
            if (ctx) ibv_close_device(ctx);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa)) continue;
            struct sockaddr_storage a;
            int gid = -1;
            char addr[INET6_ADDRSTRLEN] = "-";
            if (pa.state == IBV_PORT_ACTIVE &&
                port_addr(ctx, p, gid_index, pa.gid_tbl_len, &a, &gid) == 0)
                inet_ntop(a.ss_family,
                          a.ss_family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)&a)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)&a)->sin6_addr,
                          addr, sizeof(addr));
            char netdev[16], path[256];
            port_netdev(ctx, name, p, pa.gid_tbl_len, netdev);
            snprintf(path, sizeof(path), "/sys/class/infiniband/%.64s/device/numa_node", name);
            fprintf(f,
                    "rdma device %s port %d: %s, link layer %s, active MTU %d (max %d; QPs use "
                    "min(active, route)), GID %d (%s), interface %s, NUMA node %d%s\n",
                    name, p, pa.state == IBV_PORT_ACTIVE ? "active" : "not active",
                    pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand",
                    mtu_bytes(pa.active_mtu), mtu_bytes(pa.max_mtu), gid, addr,
                    netdev[0] ? netdev : "-", read_int(path, -1),
                    hca_match(spec, name, p) ? "" : " [excluded by BRAID_IB_HCA]");
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
}
