/* Topology: which ranks share a host (from the host ids every rank published at init), the
 * ring order that crosses each host boundary once, and the local machine's hardware (hwloc,
 * or sysfs without it).
 *
 * The grouping and ordering functions are pure (inputs are allgathered data, so every rank
 * computes the same answer) and unit-tested with shuffled rank-to-host maps. */
#ifndef BRAID_TOPO_TOPO_H
#define BRAID_TOPO_TOPO_H

#include "braid/braid.h"

#include <stddef.h>
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

/* The local machine, as far as braid can tell. */
#define BRAID_TOPO_MAX_DEVS 16
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
    braid_topo_dev_t nic[BRAID_TOPO_MAX_DEVS];
    braid_topo_dev_t gpu[BRAID_TOPO_MAX_DEVS];
} braid_topo_hw_t;

/* Discovers the local machine (hwloc when built with it, else sysfs). braid pins nothing:
 * the result is informational (braid-info, logs, the cost model). Never fails: unknown
 * fields are 0 / -1. */
void braid_topo_discover(braid_topo_hw_t *hw);
/* Prints hw as a few human-readable lines. */
void braid_topo_hw_print(const braid_topo_hw_t *hw, FILE *f);

#endif
