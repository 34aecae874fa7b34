/* The table of built-in transports. */
#include "transport/rdma.h"
#include "transport/tcp.h"
#include "transport/transport.h"

#include <string.h>
#include <strings.h>

static const braid_transport_t *const transports[] = {
    &braid_transport_shm,
    &braid_transport_tcp,
#if BRAID_HAVE_VERBS
    &braid_transport_rdma,
#endif
};

const braid_transport_t *braid_transport_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
        if (!strcasecmp(transports[i]->name, name)) return transports[i];
    return NULL;
}

void braid_transport_comm_cleanup(struct braid_comm *comm)
{
    for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
        if (transports[i]->comm_cleanup) transports[i]->comm_cleanup(comm);
}

braid_result_t braid_transport_mem_register(struct braid_comm *comm, void *buf, size_t bytes)
{
    size_t n = sizeof(transports) / sizeof(transports[0]);
    for (size_t i = 0; i < n; i++) {
        if (!transports[i]->mem_register) continue;
        braid_result_t r = transports[i]->mem_register(comm, buf, bytes);
        if (r == BRAID_SUCCESS) continue;
        while (i-- > 0)
            if (transports[i]->mem_deregister) transports[i]->mem_deregister(comm, buf, bytes);
        return r;
    }
    return BRAID_SUCCESS;
}

void braid_transport_mem_deregister(struct braid_comm *comm, void *buf, size_t bytes)
{
    for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
        if (transports[i]->mem_deregister) transports[i]->mem_deregister(comm, buf, bytes);
}
