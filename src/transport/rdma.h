/* RDMA verbs transport (rdma.c), built only when libibverbs/librdmacm are found. */
#ifndef BRAID_TRANSPORT_RDMA_H
#define BRAID_TRANSPORT_RDMA_H

#include "transport/transport.h"

#include <stdio.h>

#if BRAID_HAVE_VERBS
extern const braid_transport_t braid_transport_rdma;
/* 1 if this host has a verbs device with an active port (checked once, cheap after). */
int braid_rdma_usable(void);
/* Lists every verbs device and port: state, link layer, MTU and the GID braid would use. */
void braid_rdma_print_devices(FILE *f);
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
