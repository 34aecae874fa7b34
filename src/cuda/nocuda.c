/* cuda.h for a build without CUDA (BRAID_WITH_CUDA=OFF or no nvcc): no device; a pointer is host
 * memory unless the program's own CUDA driver says otherwise (drvptr.c), and the stream-ordered
 * forms answer BRAID_ERR_UNSUPPORTED (coll_dev.c). */
#include "cuda/cuda.h"
#include "core/comm.h"
#include "core/log.h"

#include <string.h>

static int (*_Atomic test_classifier)(const void *p);

int braid_cuda_built(void)
{
    return 0;
}

int braid_cuda_ndevices(const char **why_p)
{
    if (why_p) *why_p = "braid was built without CUDA";
    return 0;
}

int braid_cuda_current_device(void)
{
    return -1;
}

int braid_cuda_ptr_device(const void *p)
{
    int (*fn)(const void *) = atomic_load_explicit(&test_classifier, memory_order_relaxed);
    return fn ? fn(p) : braid_cuda_drv_ptr_device(p);
}

void braid_cuda_test_set_classifier(int (*fn)(const void *p))
{
    atomic_store(&test_classifier, fn);
}

void braid_cuda_test_set_driver_present(int yes)
{
    (void)yes;
}

braid_result_t braid_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_dev_alloc(void **p_p, size_t bytes)
{
    *p_p = NULL;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "device memory (%zu bytes): built without CUDA",
                           bytes);
}

braid_result_t braid_cuda_dev_free(void *p)
{
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "device memory %p: built without CUDA", p);
}

braid_result_t braid_cuda_host_alloc(void **p_p, size_t bytes)
{
    (void)p_p;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "pinned memory (%zu bytes): built without CUDA",
                           bytes);
}

void braid_cuda_host_free(void *p)
{
    (void)p;
}

braid_result_t braid_cuda_comm_init(struct braid_comm *comm)
{
    comm->cuda_dev = -1;
    comm->cuda = NULL;
    braid_cuda_drv_probe();
    return BRAID_SUCCESS;
}

void braid_cuda_comm_free(struct braid_comm *comm)
{
    (void)comm;
}

braid_result_t braid_cuda_comm_copy(struct braid_comm *comm, void *dst, const void *src,
                                    size_t bytes)
{
    (void)comm;
    (void)dst;
    (void)src;
    return braid_set_error(BRAID_ERR_UNSUPPORTED,
                           "copy of %zu B of device memory: built without "
                           "CUDA",
                           bytes);
}

braid_result_t braid_cuda_run_blocking(struct braid_comm *comm, const struct braid_op_args *a)
{
    (void)comm;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "%s: device buffers: built without CUDA",
                           braid_coll_name(a->coll));
}

int braid_cuda_engine_will_run(struct braid_comm *comm, const struct braid_op_args *a)
{
    (void)comm;
    (void)a;
    return 0; /* no device engine: braid_cuda_run_blocking answers */
}

braid_result_t braid_cuda_prepare_queued(struct braid_comm *comm, const struct braid_op_args *a)
{
    (void)comm;
    (void)a;
    return BRAID_SUCCESS; /* braid_cuda_run_blocking answers */
}

braid_result_t braid_cuda_enqueue(struct braid_comm *comm, const struct braid_op_args *a,
                                  void *stream)
{
    (void)comm;
    (void)stream;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "%s_stream: built without CUDA",
                           braid_coll_name(a->coll));
}

braid_result_t braid_cuda_run_queued(struct braid_comm *comm, struct braid_request *req)
{
    (void)comm;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "%s_stream: built without CUDA",
                           braid_coll_name(req->args.coll));
}

braid_result_t braid_cuda_stream_wait(struct braid_comm *comm, void *stream)
{
    (void)comm;
    (void)stream;
    return braid_set_error(BRAID_ERR_UNSUPPORTED, "stream-ordered call: built without CUDA");
}

void braid_cuda_engine_stats(struct braid_comm *comm, uint64_t *calls_p, uint64_t *launches_p,
                             uint64_t *idle_p, const char **why_p)
{
    (void)comm;
    *calls_p = *launches_p = *idle_p = 0;
    if (why_p) *why_p = "braid was built without CUDA";
}
