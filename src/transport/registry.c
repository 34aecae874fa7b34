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
