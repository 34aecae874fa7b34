/* RDMA verbs transport (rdma.c), built only when libibverbs/librdmacm are found. */
#ifndef BRAID_TRANSPORT_RDMA_H
#define BRAID_TRANSPORT_RDMA_H

#include "transport/transport.h"

#include <stdint.h>
#include <stdio.h>

#if BRAID_HAVE_VERBS
extern const braid_transport_t braid_transport_rdma;
/* 1 if this host has a verbs device with an active port (checked once, cheap after). */
int braid_rdma_usable(void);
/* Lists every verbs device and port: state, link layer, MTU and the GID braid would use. */
void braid_rdma_print_devices(FILE *f);
struct ibv_pd;
struct ibv_mr;
/* GPUDirect RDMA hook: registers device (GPU) memory [addr, addr + len) on pd for RDMA with
 * ibv_reg_dmabuf_mr (or nvidia-peermem's ibv_reg_mr) once braid has CUDA support to tell
 * device pointers apart and export them as dma-bufs. Today it returns BRAID_ERR_UNSUPPORTED
 * with a message saying so, and never a fake registration (rdma_mr.c). */
braid_result_t braid_rdma_reg_device_mem(struct ibv_pd *pd, void *addr, size_t len, int access,
                                         struct ibv_mr **mr_p);
struct braid_comm;
/* For tests: the registration cache counters of comm's rdma state (0), or -1 without one. */
int braid_rdma_reg_stats(struct braid_comm *comm, uint64_t *registrations, size_t *ranges,
                         size_t *entries);
/* For tests: messages comm's rdma receive connections got zero-copy (straight into a
 * registered output buffer). */
uint64_t braid_rdma_zc_received(struct braid_comm *comm);
#else
static inline void braid_rdma_print_devices(FILE *f)
{
    fprintf(f, "rdma devices: not built (no libibverbs/librdmacm at configure time)\n");
}

static inline int braid_rdma_usable(void)
{
    return 0;
}
#endif

#endif
