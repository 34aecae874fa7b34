/* Topology: which ranks share a host (from the host ids every rank published at init), the
 * ring order that crosses each host boundary once and NUMA boundaries the fewest times
 * (topo.c), the local machine's hardware (hwloc, or sysfs without it; hw.c), and where this
 * process runs in it: its NUMA node, local NICs/GPUs, and pinning braid's threads (place.c).
 *
 * The grouping and ordering functions are pure (inputs are allgathered data, so every rank
 * computes the same answer) and unit-tested with shuffled rank-to-host maps. */
#ifndef BRAID_TOPO_TOPO_H
#define BRAID_TOPO_TOPO_H

#include "braid/braid.h"

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Host grouping of a communicator. Hosts are numbered in the order of their lowest rank (the
 * host of rank 0 is host 0), local ranks in rank order within a host. */
typedef struct {
    int nranks, nhosts;
    int *host;                /* nranks: host index of each rank */
    int *local_rank;          /* nranks: position of each rank among the ranks of its host */
    int *host_size;           /* nhosts: ranks on each host */
    int min_local, max_local; /* smallest and largest host_size */
} braid_topo_t;

/* Groups n ranks by host id: the id of rank r is the NUL-terminated string at
 * ids + r * stride (equal strings = same host). Outputs only on success. */
braid_result_t braid_topo_group(int n, const char *ids, size_t stride, braid_topo_t *t_p);
void braid_topo_free(braid_topo_t *t);
/* The ranks on host h in rank order (n entries available); returns their number. */
int braid_topo_host_ranks(const braid_topo_t *t, int h, int *ranks);

/* Ring order: order[pos] = the rank at ring position pos, for n ranks whose host (and NUMA
 * node, numa may be NULL) are given as arbitrary integer ids. Ranks are grouped by host, hosts
 * ordered by their lowest rank; within a host by NUMA id, then rank. The ring then crosses
 * each host boundary exactly once (and each NUMA boundary within a host once). Returns
 * BRAID_ERR_NOMEM or success (order untouched on failure). */
braid_result_t braid_topo_ring_order(int n, const int *host, const int *numa, int *order);
/* Ring edges (pos -> pos+1 mod n) that join different hosts. */
int braid_topo_ring_crossings(int n, const int *host, const int *order);
/* Ring edges that join different NUMA ids within one host (-1, unknown, counts as an id). */
int braid_topo_ring_numa_crossings(int n, const int *host, const int *numa, const int *order);
/* The least number of NUMA crossings any ring over these ranks has: a host with k > 1 NUMA
 * ids needs k - 1 (it is one stretch of the ring), or k when it is the only host. */
int braid_topo_min_numa_crossings(int n, const int *host, const int *numa);

/* Prints the rings a communicator builds for n ranks with these host labels (the label of
 * rank r is the string at labels + r * stride) and NUMA ids (NULL: unknown): each of the
 * nchannels rings in order, '|' between hosts, its host and NUMA crossings against the fewest
 * possible, and the rank-order ring's crossings for comparison. Errors: NOMEM. */
braid_result_t braid_topo_rings_print(int n, const char *labels, size_t stride, const int *numa,
                                      int nchannels, FILE *f);

/* The local machine, as far as braid can tell. */
#define BRAID_TOPO_MAX_DEVS 16
#define BRAID_TOPO_MAX_NUMA 64
typedef struct {
    char name[32]; /* interface name (NIC) or PCI bus id (GPU) */
    int numa;      /* NUMA node the device hangs off, -1 if unknown */
    int local;     /* 1 if that node is where this process runs, 0 if not, -1 unknown */
} braid_topo_dev_t;

typedef struct {
    const char *source; /* "hwloc" or "sysfs" (degraded: less precise) */
    int npackages, nnuma, ncores, npus;
    int my_numa; /* NUMA node of every cpu this process may run on, -1 if several/unknown */
    int nnics, ngpus;
    int nic_hook; /* 1 if nic[] came from BRAID_NIC_NUMA */
    braid_topo_dev_t nic[BRAID_TOPO_MAX_DEVS];
    braid_topo_dev_t gpu[BRAID_TOPO_MAX_DEVS];
    int nnode_sets;                           /* NUMA nodes whose cpus are known */
    int node_id[BRAID_TOPO_MAX_NUMA];         /* their OS numbers */
    cpu_set_t node_cpus[BRAID_TOPO_MAX_NUMA]; /* and cpus */
} braid_topo_hw_t;

/* Discovers the local machine (hwloc when built with it, else sysfs) once per process, then
 * places the calling thread in it (my_numa and each device's local flag from its current cpu
 * affinity). Never fails: unknown fields are 0 / -1. */
void braid_topo_discover(braid_topo_hw_t *hw);
/* Recomputes hw's my_numa and local flags for a process allowed on cpus. With a single NUMA
 * node every cpu and device is on it. */
void braid_topo_locate(braid_topo_hw_t *hw, const cpu_set_t *cpus);
/* The cpus of every NUMA node that cpus touches (a copy of cpus when the nodes are unknown). */
void braid_topo_numa_cpus(const braid_topo_hw_t *hw, const cpu_set_t *cpus, cpu_set_t *out);
/* Prints hw as a few human-readable lines. */
void braid_topo_hw_print(const braid_topo_hw_t *hw, FILE *f);
/* Writes set as a kernel-style cpu list ("0-3,8"); "none" when empty. */
void braid_topo_cpulist(const cpu_set_t *set, char *buf, size_t len);
/* Parses a kernel cpu list ("0-3,8,10-11", up to a newline) into set. */
void braid_topo_cpulist_parse(const char *s, cpu_set_t *set);

/* Where a rank runs, as it publishes it to its peers at init. */
#define BRAID_TOPO_PEER_DEVS 4
typedef struct {
    int32_t numa;  /* NUMA node of its cpus (or BRAID_NUMA_ID), -1 if several/unknown */
    int32_t nnics; /* local NICs (interface names) and GPUs (PCI bus ids) listed below */
    int32_t ngpus;
    int32_t numa_forced; /* 1 if numa came from BRAID_NUMA_ID */
    char nic[BRAID_TOPO_PEER_DEVS][16];
    char gpu[BRAID_TOPO_PEER_DEVS][16];
} braid_topo_place_t;

/* This process's place for a thread allowed on cpus: its NUMA node from the binding (or
 * BRAID_NUMA_ID when set: a test hook for fake multi-NUMA layouts), and the NICs and GPUs on
 * the NUMA node(s) its cpus touch (or on the forced node). Errors: a bad BRAID_NUMA_ID. */
braid_result_t braid_topo_place(const cpu_set_t *cpus, braid_topo_place_t *place_p);

/* BRAID_NIC_NUMA (a test hook, like BRAID_NUMA_ID): "name:node,name:node,..." replaces the
 * discovered NICs by these interface names on these NUMA nodes (veth and bridge interfaces,
 * which discovery skips, can so stand for NICs). Parses s into devs (at most
 * BRAID_TOPO_MAX_DEVS); an empty s gives 0 NICs. Errors: INVALID_ARG naming the bad entry. */
braid_result_t braid_topo_nic_hook_parse(const char *s, braid_topo_dev_t *devs, int *n_p);

/* One interface address as a rank publishes it (what its peers can reach it on). */
#define BRAID_TOPO_MAX_ADDRS 8
typedef struct {
    char ifname[16];
    uint8_t family; /* AF_INET or AF_INET6 */
    uint8_t prefix; /* netmask length */
    uint8_t addr[16];
} braid_topo_ifaddr_t;

typedef struct {
    int32_t n;
    braid_topo_ifaddr_t a[BRAID_TOPO_MAX_ADDRS];
} braid_topo_addrs_t;

/* This host's addresses: interfaces that are up, IPv4 and global IPv6, not loopback,
 * link-local, docker* or virbr* (the first BRAID_TOPO_MAX_ADDRS). Never fails (n = 0). */
void braid_topo_addrs_collect(braid_topo_addrs_t *out);
/* 1 if a and b are of one family and equal in the first prefix bits. */
int braid_topo_addr_same_subnet(const braid_topo_ifaddr_t *a, const braid_topo_ifaddr_t *b,
                                int prefix);

/* The NIC choice for a rank's data listener (tcp, rdma's address), a pure function.
 * nics: this host's NICs with their NUMA nodes; mine: this host's addresses; others: the
 * address lists of the ranks on other hosts (nothers of them); family: that of the address
 * that routes to the bootstrap root. A NIC is usable if it has an address of that family
 * (its first one) whose subnet every list in others has an address in. With fewer than two
 * usable NICs the result is -1: keep the route to the root (single-NIC hosts are unchanged).
 * Else the usable NICs are taken in name order; those on my_numa (>= 0) are local, and the
 * rank takes local[local_rank % nlocal], or usable[local_rank % nusable] when none is local.
 * Returns the index in mine->a of the chosen address, or -1; why (may be NULL) says why. */
int braid_topo_nic_choose(const braid_topo_dev_t *nics, int nnics, const braid_topo_addrs_t *mine,
                          const braid_topo_addrs_t *const *others, int nothers, int family,
                          int my_numa, int local_rank, char *why, size_t len);

/* An active RDMA port as the rdma transport's NIC choice sees it (transport/rdma_dev.c). */
typedef struct {
    char dev[32];    /* RDMA device name (rxe0, mlx5_0) */
    int port;        /* its port number */
    char netdev[16]; /* its network interface (RoCE: the GID's; IB: IPoIB), "" if none */
    int numa;        /* the device's NUMA node (/sys/class/infiniband/DEV/device), -1 unknown */
    int hw;          /* 1 if the device has a sysfs device (hardware), 0 (Soft-RoCE) */
} braid_topo_rdma_port_t;

/* The NICs rdma chooses from with braid_topo_nic_choose, a pure function: each NIC of nics
 * (discovered, or BRAID_NIC_NUMA's) that is the network interface of some port in ports, on
 * that port's NUMA node when it is known (>= 0), else on the NIC's; then, when add_unlisted,
 * the interfaces of hardware ports (hw) that nics lacks (a bonded RoCE device), on the port's
 * node. NICs without an active RDMA port are left out. nics's order, then ports'; no name
 * twice. Writes at most BRAID_TOPO_MAX_DEVS entries to out and returns their number. */
int braid_topo_nic_filter(const braid_topo_dev_t *nics, int nnics,
                          const braid_topo_rdma_port_t *ports, int nports, int add_unlisted,
                          braid_topo_dev_t *out);

/* Names the calling thread (at most 15 characters kept) and, unless cpus is NULL, pins it to
 * cpus. Returns 0 or the errno of the failed pin. */
int braid_topo_pin_self(const char *name, const cpu_set_t *cpus);

#endif
