/* braid_comm_register / braid_comm_deregister: user buffers registered with a communicator's
 * transports (the rdma transport pins and registers them in its registration cache; shm and
 * tcp need nothing). Handles live in one list so a stale or foreign handle is refused without
 * being dereferenced. */
#include "core/comm.h"
#include "core/log.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdlib.h>

struct braid_reg {
    struct braid_comm *comm;
    void *buf;
    size_t bytes;
    struct braid_reg *next;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct braid_reg *g_regs;

static braid_result_t do_register(braid_comm_t comm, void *buf, size_t bytes, braid_reg_t *handle_p)
{
    if (!handle_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "braid_comm_register: handle_p is NULL");
    if (!buf && bytes)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "braid_comm_register: buf is NULL with bytes = %zu", bytes);
    if (bytes && (uintptr_t)buf + bytes < (uintptr_t)buf)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "braid_comm_register: buf %p + bytes %zu wraps around", buf, bytes);
    struct braid_reg *h = calloc(1, sizeof(*h));
    if (!h) return braid_set_error(BRAID_ERR_NOMEM, "braid_comm_register: out of memory");
    h->comm = comm;
    h->buf = buf;
    h->bytes = bytes;
    if (bytes) {
        braid_result_t r = braid_transport_mem_register(comm, buf, bytes);
        if (r != BRAID_SUCCESS) {
            free(h);
            return r;
        }
    }
    pthread_mutex_lock(&g_mu);
    h->next = g_regs;
    g_regs = h;
    pthread_mutex_unlock(&g_mu);
    braid_debug(NET, "registered %p + %zu bytes", buf, bytes);
    *handle_p = h;
    return BRAID_SUCCESS;
}

braid_result_t braid_comm_register(braid_comm_t comm, void *buf, size_t bytes,
                                   braid_reg_t *handle_p)
{
    BRAID_CHECK(braid_comm_enter(comm)); /* a destroy from another thread waits for us */
    braid_result_t res = do_register(comm, buf, bytes, handle_p);
    braid_comm_leave(comm);
    return res;
}

static braid_result_t do_deregister(braid_comm_t comm, braid_reg_t handle)
{
    pthread_mutex_lock(&g_mu);
    struct braid_reg **pp = &g_regs;
    while (*pp && *pp != handle)
        pp = &(*pp)->next;
    if (!handle || !*pp || (*pp)->comm != comm) {
        pthread_mutex_unlock(&g_mu);
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "braid_comm_deregister: handle %p is not registered on this "
                               "communicator (NULL, deregistered already, or another comm's)",
                               (void *)handle);
    }
    *pp = handle->next;
    pthread_mutex_unlock(&g_mu);
    if (handle->bytes) braid_transport_mem_deregister(comm, handle->buf, handle->bytes);
    free(handle);
    return BRAID_SUCCESS;
}

braid_result_t braid_comm_deregister(braid_comm_t comm, braid_reg_t handle)
{
    BRAID_CHECK(braid_comm_enter(comm));
    braid_result_t res = do_deregister(comm, handle);
    braid_comm_leave(comm);
    return res;
}

/* Called while the communicator is being destroyed (braid_comm_check refuses it by then). */
void braid_comm_reg_cleanup(struct braid_comm *comm)
{
    for (;;) {
        pthread_mutex_lock(&g_mu);
        struct braid_reg **pp = &g_regs, *h;
        while (*pp && (*pp)->comm != comm)
            pp = &(*pp)->next;
        h = *pp;
        if (h) *pp = h->next;
        pthread_mutex_unlock(&g_mu);
        if (!h) return;
        braid_warn(NET, "braid_comm_destroy: buffer %p + %zu bytes was still registered", h->buf,
                   h->bytes);
        if (h->bytes) braid_transport_mem_deregister(comm, h->buf, h->bytes);
        free(h);
    }
}
