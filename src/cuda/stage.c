/* Device buffers: the device engine (executor.c) when it applies, else through the CPU engine:
 * a blocking collective on CUDA memory copies its input to pinned host memory, runs the host
 * collective (any algorithm, any transport) and copies the result back. Staging is what runs
 * for communicators that span hosts (no proxy thread feeds the network from device slots yet),
 * float8 dtypes and PreMulSum ops; it is correct for every collective, in place or not, and
 * needs nothing from peers but the ordinary host protocol.
 *
 * The communicator keeps one pinned staging area (grown on demand), used by one collective at
 * a time (collectives on a communicator run one at a time, in order). */
#include "core/comm.h"
#include "core/log.h"
#include "core/worker.h"
#include "cuda/cuda.h"
#include "cuda/cuda_comm.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

braid_result_t braid_cuda_comm_init(struct braid_comm *comm)
{
    comm->cuda_dev = braid_cuda_current_device();
    if (comm->cuda_dev < 0) return BRAID_SUCCESS;
    struct braid_cuda_comm *cc = calloc(1, sizeof(*cc));
    if (!cc) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the CUDA state");
    cc->dev = comm->cuda_dev;
    pthread_mutex_init(&cc->lock, NULL);
    comm->cuda = cc;
    braid_debug(INIT, "rank %d uses CUDA device %d", comm->rank, comm->cuda_dev);
    return BRAID_SUCCESS;
}

void braid_cuda_comm_free(struct braid_comm *comm)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc) return;
    braid_cuda_engine_free(comm);
    braid_cuda_host_free(cc->stage);
    if (cc->flag) cudaFreeHost((void *)cc->flag);
    pthread_mutex_destroy(&cc->lock);
    free(cc);
    comm->cuda = NULL;
}

static braid_result_t stage_reserve(struct braid_cuda_comm *cc, size_t bytes)
{
    if (cc->stage_bytes >= bytes) return BRAID_SUCCESS;
    size_t want = cc->stage_bytes ? cc->stage_bytes : ((size_t)1 << 20);
    while (want < bytes)
        want *= 2;
    void *p;
    BRAID_CHECK(braid_cuda_host_alloc(&p, want));
    braid_cuda_host_free(cc->stage);
    cc->stage = p;
    cc->stage_bytes = want;
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_run_blocking(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc)
        return braid_set_error(BRAID_ERR_INTERNAL, "%s: device buffers on a comm without CUDA",
                               braid_coll_name(a->coll));
    if (cudaSetDevice(cc->dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_SYSTEM, "%s: cannot select CUDA device %d",
                               braid_coll_name(a->coll), cc->dev);
    }
    /* The device engine when it applies (executor.c), else staged here. */
    int eng = braid_cuda_engine_try(comm, a);
    if (eng != BRAID_INPROGRESS) return eng;
    size_t es = braid_dtype_size(a->dtype), n = (size_t)comm->nranks;
    size_t bytes = a->count * es;
    size_t in_bytes = a->coll == BRAID_COLL_REDUCE_SCATTER ? bytes * n : bytes;
    size_t out_bytes = a->coll == BRAID_COLL_ALLGATHER ? bytes * n : bytes;
    int rooted = a->coll == BRAID_COLL_BROADCAST || a->coll == BRAID_COLL_REDUCE;
    int root = rooted && comm->rank == a->root;
    int has_in = a->sendbuf && (a->coll != BRAID_COLL_BROADCAST || root);
    int has_out = a->recvbuf && (a->coll != BRAID_COLL_REDUCE || root);
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    /* Host images of the buffers: the output first, then the input unless it lies inside the
     * output (in place: same address, or this rank's block of it). */
    size_t in_at = out_bytes; /* offset of the input image in the staging area */
    int in_inside = 0;
    if (has_in && has_out && sb >= rb && sb + in_bytes <= rb + out_bytes) {
        in_at = (size_t)(sb - rb);
        in_inside = 1;
    } else if (has_in && has_out && rb >= sb && rb + out_bytes <= sb + in_bytes) {
        /* reduce-scatter in place: the output is this rank's block of the input */
        in_at = 0;
        in_inside = 2;
    }
    size_t need = in_inside ? (in_inside == 2 ? in_bytes : out_bytes) : out_bytes + in_bytes;
    braid_result_t res;
    int ran = 0;
    pthread_mutex_lock(&cc->lock);
    BRAID_CHECK_GOTO(stage_reserve(cc, need), res, out);
    char *base = cc->stage;
    braid_op_args_t h = *a;
    h.on_device = 0;
    if (in_inside == 2) {
        h.sendbuf = has_in ? base : NULL;
        h.recvbuf = has_out ? base + (rb - sb) : NULL;
    } else {
        h.recvbuf = has_out ? base : NULL;
        h.sendbuf = has_in ? base + in_at : NULL;
    }
    if (has_in) BRAID_CHECK_GOTO(braid_cuda_memcpy((void *)h.sendbuf, sb, in_bytes), res, out);
    ran = 1;
    res = braid_coll_execute(comm, &h); /* records its own failures */
    if (res == BRAID_SUCCESS && has_out) {
        res = braid_cuda_memcpy(rb, h.recvbuf, out_bytes);
        if (res < 0) braid_comm_set_error(comm, res, "%s", braid_last_error());
    }
out:
    pthread_mutex_unlock(&cc->lock);
    if (res < 0 && !ran) {
        /* The peers run this collective: tell them it failed here (as a failed run does). */
        char why[600];
        snprintf(why, sizeof(why), "rank %d: %s", comm->rank, braid_last_error());
        braid_comm_set_error(comm, res, "%s", braid_last_error());
        braid_comm_fail_peers(comm, res, why);
    }
    return res;
}
