/* Device buffers in the collectives' argument checks, and the stream-ordered entry points
 * (braid_<coll>_stream). The CUDA work itself is in src/cuda (cuda.h).
 *
 * Which memory a buffer is, is decided per call: braid_cuda_ptr_device asks the runtime
 * (cudaPointerGetAttributes) when the process has a CUDA device; otherwise a buffer is host
 * memory (a load and a compare) unless the program loaded CUDA's driver itself, which is then
 * asked (src/cuda/drvptr.c). A communicator uses the device that
 * was current when it was initialised (as NCCL); device buffers of another device, or a mix of
 * host and device buffers in one call, are BRAID_ERR_INVALID_ARG; device buffers on a
 * communicator without a device are BRAID_ERR_UNSUPPORTED. */
#include "core/comm.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/worker.h"
#include "cuda/cuda.h"

/* Whether device d's memory (d >= 0) can be bufname of a call on comm: an error naming it
 * when the communicator has no device or another one. */
static braid_result_t dev_usable(struct braid_comm *comm, const char *name, const char *bufname,
                                 int d)
{
    if (comm->cuda_dev < 0) {
        const char *why;
        (void)braid_cuda_ndevices(&why);
        return braid_set_error(BRAID_ERR_UNSUPPORTED,
                               "%s: %s is CUDA device memory (device %d) but this communicator "
                               "has no CUDA device (%s)",
                               name, bufname, d, why);
    }
    if (d != comm->cuda_dev)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "%s: %s is memory of CUDA device %d but this communicator uses "
                               "device %d (the current device at its init)",
                               name, bufname, d, comm->cuda_dev);
    return BRAID_SUCCESS;
}

braid_result_t braid_dev_buf_check(struct braid_comm *comm, const char *name, const char *bufname,
                                   const void *p, int *on_dev)
{
    *on_dev = 0;
    int d = p ? braid_cuda_ptr_device(p) : -1;
    if (d < 0) return BRAID_SUCCESS;
    BRAID_CHECK(dev_usable(comm, name, bufname, d));
    *on_dev = 1;
    return BRAID_SUCCESS;
}

static braid_result_t (*test_prepare_hook)(struct braid_comm *comm, const braid_op_args_t *a);

void braid_cuda_test_set_prepare_hook(braid_result_t (*fn)(struct braid_comm *comm,
                                                           const struct braid_op_args *a))
{
    test_prepare_hook = fn;
}

braid_result_t braid_coll_prepare_dev(struct braid_comm *comm, const braid_op_args_t *a)
{
    return test_prepare_hook ? test_prepare_hook(comm, a) : braid_cuda_prepare_queued(comm, a);
}

static int test_engine_runs = -1; /* braid_cuda_test_set_engine_runs */

void braid_cuda_test_set_engine_runs(int v)
{
    test_engine_runs = v;
}

braid_result_t braid_coll_check_device(struct braid_comm *comm, braid_op_args_t *a, int has_send,
                                       int has_recv)
{
    int sd = has_send ? braid_cuda_ptr_device(a->sendbuf) : -2;
    int rd = has_recv ? braid_cuda_ptr_device(a->recvbuf) : -2;
    a->on_device = 0;
    if (sd < 0 && rd < 0) return BRAID_SUCCESS;
    const char *name = braid_coll_name(a->coll);
    if (comm->cuda_dev < 0)
        return dev_usable(comm, name, sd >= 0 ? "sendbuf" : "recvbuf", sd >= 0 ? sd : rd);
    if ((sd == -1 && rd >= 0) || (sd >= 0 && rd == -1))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "%s: sendbuf is %s memory and recvbuf %s memory: both must be "
                               "device memory or both host memory",
                               name, sd >= 0 ? "device" : "host", rd >= 0 ? "device" : "host");
    if (sd >= 0) BRAID_CHECK(dev_usable(comm, name, "sendbuf", sd));
    if (rd >= 0) BRAID_CHECK(dev_usable(comm, name, "recvbuf", rd));
    /* The device engine's reduction kernels (src/cuda/reduce_dev.cuh) load and store whole
     * elements where the buffers are not co-aligned: an element at a misaligned address is a
     * fatal cudaErrorMisalignedAddress. Refused only where the engine runs (or, before its
     * collective setup, may run) the call: a call staged through the host takes any address,
     * as NCCL does, and so do copies (broadcast, allgather), which go byte by byte there. */
    size_t es = braid_dtype_size(a->dtype);
    if (es > 1 &&
        (a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
         a->coll == BRAID_COLL_REDUCE_SCATTER) &&
        ((sd >= 0 && (uintptr_t)a->sendbuf % es) || (rd >= 0 && (uintptr_t)a->recvbuf % es)) &&
        (test_engine_runs >= 0 ? test_engine_runs : braid_cuda_engine_will_run(comm, a))) {
        int k = !(sd >= 0 && (uintptr_t)a->sendbuf % es);
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "%s: %s=%p is device memory not aligned to its %zu-byte %s "
                               "elements (the device engine, which runs this call, needs "
                               "element-aligned device buffers)",
                               name, k ? "recvbuf" : "sendbuf", k ? a->recvbuf : a->sendbuf, es,
                               braid_dtype_name(a->dtype));
    }
    a->on_device = 1;
    return BRAID_SUCCESS;
}

static braid_result_t run_stream_in(struct braid_comm *comm, braid_op_args_t *a, braid_stream_t s)
{
    const char *name = braid_coll_name(a->coll);
    if (comm->cuda_dev < 0) {
        const char *why;
        (void)braid_cuda_ndevices(&why);
        /* Told to the peers too: a peer with a device would otherwise wait for the timeout. */
        return braid_coll_reject(comm, a,
                                 braid_set_error(BRAID_ERR_UNSUPPORTED,
                                                 "%s_stream: this communicator has no CUDA "
                                                 "device (%s)",
                                                 name, why));
    }
    braid_result_t vres = braid_coll_validate(comm, a);
    if (vres < 0) return braid_coll_reject(comm, a, vres); /* the peers' call fails too */
    /* Refused here before anything was queued (a stream under graph capture, a failed prepare,
     * event record or stream wait): this rank still takes the call's number and tells the
     * peers, as for a bad argument, so their call fails at once naming the reason instead of
     * waiting for the timeout. */
    braid_result_t res = a->on_device ? braid_cuda_enqueue(comm, a, s) /* every error: not queued */
                                      : braid_cuda_stream_wait(comm, s);
    if (res < 0) return braid_coll_reject(comm, a, res);
    /* Host buffers: ordered after the stream's work, complete on return. */
    return a->on_device ? BRAID_SUCCESS : braid_coll_submit(comm, a);
}

/* As every collective entry: the communicator is entered by one thread at a time. */
static braid_result_t run_stream(struct braid_comm *comm, braid_op_args_t *a, braid_stream_t s)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, braid_coll_name(a->coll)));
    braid_result_t res = run_stream_in(comm, a, s);
    braid_comm_leave_call(comm);
    return res;
}

#define SARGS(c, s, r, n, d, o, rt)                                                                \
    (braid_op_args_t)                                                                              \
    {                                                                                              \
        .coll = (c), .sendbuf = (s), .recvbuf = (r), .count = (n), .dtype = (d), .op = (o),        \
        .root = (rt)                                                                               \
    }

braid_result_t braid_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm,
                                      braid_stream_t stream)
{
    braid_op_args_t a = SARGS(BRAID_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1);
    return run_stream(comm, &a, stream);
}

braid_result_t braid_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      braid_datatype_t dtype, int root, braid_comm_t comm,
                                      braid_stream_t stream)
{
    braid_op_args_t a = SARGS(BRAID_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, 0, root);
    return run_stream(comm, &a, stream);
}

braid_result_t braid_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                   braid_datatype_t dtype, braid_redop_t op, int root,
                                   braid_comm_t comm, braid_stream_t stream)
{
    braid_op_args_t a = SARGS(BRAID_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root);
    return run_stream(comm, &a, stream);
}

braid_result_t braid_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           braid_datatype_t dtype, braid_redop_t op,
                                           braid_comm_t comm, braid_stream_t stream)
{
    braid_op_args_t a =
        SARGS(BRAID_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, -1);
    return run_stream(comm, &a, stream);
}

braid_result_t braid_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      braid_datatype_t dtype, braid_comm_t comm,
                                      braid_stream_t stream)
{
    braid_op_args_t a = SARGS(BRAID_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, 0, -1);
    return run_stream(comm, &a, stream);
}

braid_result_t braid_comm_stream_wait(braid_comm_t comm, braid_stream_t stream)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, "comm_stream_wait"));
    braid_result_t res =
        comm->cuda_dev < 0 ? BRAID_SUCCESS : braid_cuda_stream_wait(comm, (void *)stream);
    braid_comm_leave_call(comm);
    return res;
}

int braid_cuda_device_count(void)
{
    return braid_cuda_ndevices(NULL);
}

braid_result_t braid_cuda_mem_alloc(void **ptr_p, size_t bytes)
{
    braid_clear_error();
    if (!ptr_p)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "braid_cuda_mem_alloc: ptr_p is NULL");
    *ptr_p = NULL;
    if (!bytes) return braid_set_error(BRAID_ERR_INVALID_ARG, "braid_cuda_mem_alloc: bytes is 0");
    const char *why;
    if (braid_cuda_ndevices(&why) < 1)
        return braid_set_error(BRAID_ERR_UNSUPPORTED, "braid_cuda_mem_alloc: no CUDA device (%s)",
                               why);
    return braid_cuda_dev_alloc(ptr_p, bytes);
}

braid_result_t braid_cuda_mem_free(void *ptr)
{
    braid_clear_error();
    if (!ptr) return BRAID_SUCCESS;
    /* Without a device of braid's own the pointer cannot be braid's (the program's own device
     * memory is what braid_cuda_ptr_device then recognises: not braid's to free). */
    if (braid_cuda_ndevices(NULL) < 1 || braid_cuda_ptr_device(ptr) < 0)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "braid_cuda_mem_free: ptr=%p is not CUDA device memory", ptr);
    return braid_cuda_dev_free(ptr);
}
