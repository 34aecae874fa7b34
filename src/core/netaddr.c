/* The local address a rank's data listeners use (tcp's listener, rdma's listen address):
 * BRAID_SOCKET_IFNAME's if set; else, on a host with several NICs that reach every other host
 * of the communicator, the one braid_topo_nic_choose picks for this rank's NUMA node and local
 * rank (topo/nic.c; rdma first keeps only the NICs with an active RDMA port,
 * braid_topo_nic_filter); else the address that routes to the bootstrap root, as for
 * single-NIC hosts. */
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rank's index among the processes of its host: the launcher's (braid-run, torchrun,
 * Open MPI, Slurm, MPICH) when it says, so that the ranks of a sub-communicator (one per
 * host) still spread; else its position among this communicator's ranks on its host. */
static int local_rank_of(const struct braid_comm *c, const char **src_p)
{
    static const char *vars[] = {"BRAID_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "SLURM_LOCALID", "MPI_LOCALRANKID"};
    /* The launcher the rank came from, when one did: another launcher's local rank numbers
     * other processes (SLURM_LOCALID of an srun task that runs braid-run is 0 in every rank). */
    const char *family = braid_boot_env_local_rank_var();
    size_t nvars = family ? 1 : sizeof(vars) / sizeof(vars[0]);
    for (size_t i = 0; i < nvars; i++) {
        const char *name = family ? family : vars[i];
        const char *v = getenv(name);
        char *end;
        long x = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && x >= 0 && x < 1 << 20) {
            *src_p = name;
            return (int)x;
        }
    }
    int lr = 0;
    for (int r = 0; r < c->rank; r++)
        lr += !strcmp(c->peers[r].host, c->peers[c->rank].host);
    *src_p = "rank order on this host";
    return lr;
}

static int is_loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    return a->ss_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

braid_result_t braid_comm_data_addr_filtered(struct braid_comm *c, braid_comm_nic_filter_fn filter,
                                             void *arg, struct sockaddr_storage *a_p,
                                             socklen_t *len_p, char *why, size_t len)
{
    if (*braid_param_str("SOCKET_IFNAME")) {
        snprintf(why, len, "BRAID_SOCKET_IFNAME=%s", braid_param_str("SOCKET_IFNAME"));
        return braid_boot_local_addr(a_p, len_p);
    }
    struct sockaddr_storage route;
    socklen_t rlen;
    BRAID_CHECK(braid_boot_listen_addr(&c->boot_addr, &route, &rlen));
    snprintf(why, len, "the route to the bootstrap root");
    if (!c->peers || is_loopback(&route)) goto keep; /* one host (or a loopback root) */
    const braid_topo_addrs_t **others = malloc((size_t)c->nranks * sizeof(*others));
    braid_topo_hw_t *hw = malloc(sizeof(*hw));
    if (!others || !hw) {
        free(others);
        free(hw);
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory choosing a NIC");
    }
    int nothers = 0;
    for (int r = 0; r < c->nranks; r++)
        if (strcmp(c->peers[r].host, c->peers[c->rank].host))
            others[nothers++] = &c->peers[r].addrs;
    braid_topo_discover(hw);
    if (filter && nothers) hw->nnics = filter(hw->nic, hw->nnics, hw->nic_hook, arg);
    const braid_topo_place_t *me = &c->peers[c->rank].place;
    /* On a one-node machine every NIC is local (VMs often report no node for devices). */
    if (!me->numa_forced && hw->nnuma <= 1)
        for (int i = 0; i < hw->nnics; i++)
            hw->nic[i].numa = me->numa;
    const char *lsrc;
    int lr = local_rank_of(c, &lsrc);
    char reason[200];
    const braid_topo_addrs_t *mine = &c->peers[c->rank].addrs;
    int k = nothers ? braid_topo_nic_choose(hw->nic, hw->nnics, mine, others, nothers,
                                            route.ss_family, me->numa, lr, reason, sizeof(reason))
                    : -1;
    free(others);
    free(hw);
    if (k < 0) {
        snprintf(why, len, "the route to the bootstrap root (%s)",
                 nothers ? reason : "no other host");
        goto keep;
    }
    const braid_topo_ifaddr_t *ia = &mine->a[k];
    struct sockaddr_storage a;
    memset(&a, 0, sizeof(a));
    if (ia->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&a;
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, ia->addr, 4);
        *len_p = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_addr, ia->addr, 16);
        *len_p = sizeof(*in6);
    }
    *a_p = a;
    snprintf(why, len, "NIC %s: %s (local rank from %s)", ia->ifname, reason, lsrc);
    return BRAID_SUCCESS;
keep:
    *a_p = route;
    *len_p = rlen;
    return BRAID_SUCCESS;
}

braid_result_t braid_comm_data_addr(struct braid_comm *c, struct sockaddr_storage *a_p,
                                    socklen_t *len_p, char *why, size_t len)
{
    return braid_comm_data_addr_filtered(c, NULL, NULL, a_p, len_p, why, len);
}
