/* RDMA memory registration: the user buffers of braid_comm_register, registered on the
 * protection domain that a communicator's connections on the listener device share, kept in
 * the registration cache of core/regcache.c (bounded, LRU, invalidated when the user
 * deregisters); and the GPUDirect RDMA hook for device memory. */
#include "core/comm.h"
#include "core/log.h"
#include "core/regcache.h"
#include "transport/rdma_impl.h"

#include <errno.h>
#include <string.h>

/* Whether addr is device (GPU) memory. braid has no CUDA support yet, so every pointer is host
 * memory; with it, this asks the driver (cuPointerGetAttribute, CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
 * and device buffers go to braid_rdma_reg_device_mem below. */
static int mem_is_device(const void *addr)
{
    (void)addr;
    return 0;
}

braid_result_t braid_rdma_reg_device_mem(struct ibv_pd *pd, void *addr, size_t len, int access,
                                         struct ibv_mr **mr_p)
{
    (void)pd;
    (void)access;
    (void)mr_p; /* outputs only on success */
#if BRAID_HAVE_DMABUF_MR
    const char *how = "this libibverbs has ibv_reg_dmabuf_mr, but exporting the buffer as a "
                      "dma-buf (cuMemGetHandleForAddressRange) needs braid's CUDA support";
#else
    const char *how = "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core >= 34), and "
                      "nvidia-peermem registration needs braid's CUDA support";
#endif
    return braid_set_error(BRAID_ERR_UNSUPPORTED,
                           "rdma: cannot register device memory %p (%zu bytes) for GPUDirect "
                           "RDMA: not supported yet (%s)",
                           addr, len, how);
}

static braid_result_t reg_cb(void *ctx, void *addr, size_t len, void **handle_p)
{
    rdma_state_t *st = ctx;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *mr = NULL;
    if (mem_is_device(addr)) {
        /* Where a device buffer is registered: the GPUDirect RDMA hook. */
        BRAID_CHECK(braid_rdma_reg_device_mem(st->pd, addr, len, access, &mr));
    } else {
        mr = ibv_reg_mr(st->pd, addr, len, access);
        if (!mr)
            return braid_set_error(BRAID_ERR_SYSTEM,
                                   "rdma: ibv_reg_mr of %zu bytes at %p: %s (locked-memory "
                                   "limit? see ulimit -l)",
                                   len, addr, strerror(errno));
    }
    braid_debug(NET, "rdma: registered %p + %zu bytes (lkey %#x)", addr, len, mr->lkey);
    *handle_p = mr;
    return BRAID_SUCCESS;
}

static void dereg_cb(void *ctx, void *handle)
{
    (void)ctx;
    ibv_dereg_mr(handle);
}

braid_result_t braid_rdma_reg_init(rdma_state_t *st)
{
    st->pd = ibv_alloc_pd(st->listen->verbs);
    if (!st->pd) return braid_set_error(BRAID_ERR_SYSTEM, "rdma: ibv_alloc_pd: %m");
    braid_regcache_ops_t ops = {
        .reg = reg_cb, .dereg = dereg_cb, .ctx = st, .max_entries = RDMA_REG_CACHE_MAX};
    return braid_regcache_new(&ops, &st->rc);
}

void braid_rdma_reg_free(rdma_state_t *st)
{
    if (st->rc) braid_regcache_free(st->rc);
    st->rc = NULL;
    if (st->pd) ibv_dealloc_pd(st->pd);
    st->pd = NULL;
}

braid_result_t braid_rdma_mem_register(struct braid_comm *comm, void *buf, size_t bytes)
{
    rdma_state_t *st = braid_rdma_state_find(comm);
    if (!st || !st->rc) return BRAID_SUCCESS; /* no rdma connection on this communicator */
    return braid_regcache_add_range(st->rc, buf, bytes);
}

void braid_rdma_mem_deregister(struct braid_comm *comm, void *buf, size_t bytes)
{
    rdma_state_t *st = braid_rdma_state_find(comm);
    if (st && st->rc && braid_regcache_remove_range(st->rc, buf, bytes) != BRAID_SUCCESS)
        braid_debug(NET, "rdma: %s", braid_last_error());
}

int braid_rdma_reg_stats(struct braid_comm *comm, uint64_t *registrations, size_t *ranges,
                         size_t *entries)
{
    rdma_state_t *st = braid_rdma_state_find(comm);
    if (!st || !st->rc) return -1;
    braid_regcache_stats_t s;
    braid_regcache_stats(st->rc, &s);
    *registrations = s.registrations;
    *ranges = s.ranges;
    *entries = s.entries;
    return 0;
}

uint64_t braid_rdma_zc_received(struct braid_comm *comm)
{
    rdma_state_t *st = braid_rdma_state_find(comm);
    uint64_t n = 0;
    if (!st) return 0;
    pthread_mutex_lock(&st->mu);
    for (rdma_conn_t *c = st->conns; c; c = c->next)
        n += c->zc_msgs;
    pthread_mutex_unlock(&st->mu);
    return n;
}
