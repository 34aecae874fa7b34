/* Device buffers: the device engine (executor.c) when it applies, else through the CPU engine:
 * a blocking collective on CUDA memory copies its input to pinned host memory, runs the host
 * collective (any algorithm, any transport) and copies the result back. Staging is what runs
 * for communicators that span hosts (no proxy thread feeds the network from device slots yet),
 * float8 dtypes and PreMulSum ops; it is correct for every collective, in place or not, and
 * needs nothing from peers but the ordinary host protocol.
 *
 * The communicator keeps one pinned staging area (grown on demand), used by one collective at
 * a time (collectives on a communicator run one at a time, in order), and copies on a stream
 * of its own (non-blocking, so a user stream a stream-ordered call holds never stops it).
 *
 * A stream-ordered call's worker must not allocate or free pinned memory: both synchronise
 * with the device, so with the user's stream held until that very call completes they would
 * wait forever. The area is therefore sized on the caller's thread before the stream is held
 * (braid_cuda_stage_prepare), and an area outgrown while a held stream may still use the old
 * one is retired, not freed, until no stream-ordered call is pending. */
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
    if (comm->cuda_dev < 0) {
        braid_cuda_drv_probe();
        return BRAID_SUCCESS;
    }
    struct braid_cuda_comm *cc = calloc(1, sizeof(*cc));
    if (!cc) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the CUDA state");
    cc->dev = comm->cuda_dev;
    pthread_mutex_init(&cc->lock, NULL);
    comm->cuda = cc;
    braid_debug(INIT, "rank %d uses CUDA device %d", comm->rank, comm->cuda_dev);
    return BRAID_SUCCESS;
}

static int tickets_pending(const struct braid_cuda_comm *cc)
{
    return cc->flag && __atomic_load_n(cc->flag, __ATOMIC_ACQUIRE) < cc->next_ticket;
}

static void free_retired(struct braid_cuda_comm *cc)
{
    for (int i = 0; i < cc->nretired; i++)
        braid_cuda_host_free(cc->retired[i]);
    cc->nretired = 0;
}

void braid_cuda_comm_free(struct braid_comm *comm)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc) return;
    braid_cuda_engine_free(comm);
    free_retired(cc);
    braid_cuda_host_free(cc->stage);
    if (cc->copy_stream) cudaStreamDestroy((cudaStream_t)cc->copy_stream);
    if (cc->flag) cudaFreeHost((void *)cc->flag);
    pthread_mutex_destroy(&cc->lock);
    free(cc);
    comm->cuda = NULL;
}

/* The size an area of `have` bytes grows to for `need`: doubled (from 1 MiB) until it fits. */
static size_t stage_grow(size_t have, size_t need)
{
    size_t want = have ? have : ((size_t)1 << 20);
    while (want < need)
        want *= 2;
    return want;
}

/* Under cc->lock. */
static braid_result_t copy_stream_make(struct braid_cuda_comm *cc)
{
    if (cc->copy_stream) return BRAID_SUCCESS;
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_SYSTEM, "cannot create the staging stream: %s",
                               cudaGetErrorString(e));
    }
    cc->copy_stream = s;
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_comm_copy(struct braid_comm *comm, void *dst, const void *src,
                                    size_t bytes)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc) return braid_set_error(BRAID_ERR_INTERNAL, "device buffer on a comm without CUDA");
    int prev;
    BRAID_CHECK(braid_cuda_device_enter(cc->dev, &prev));
    pthread_mutex_lock(&cc->lock);
    braid_result_t res = copy_stream_make(cc);
    void *stream = cc->copy_stream;
    pthread_mutex_unlock(&cc->lock);
    if (res == BRAID_SUCCESS) res = braid_cuda_memcpy(dst, src, bytes, stream);
    braid_cuda_device_restore(prev, cc->dev);
    return res;
}

/* Under cc->lock. */
static braid_result_t stage_reserve(struct braid_cuda_comm *cc, size_t bytes)
{
    BRAID_CHECK(copy_stream_make(cc));
    int pending = tickets_pending(cc);
    if (!pending) free_retired(cc);
    if (cc->stage_bytes >= bytes) return BRAID_SUCCESS;
    if (pending && cc->nretired == BRAID_CUDA_MAX_RETIRED)
        return braid_set_error(BRAID_ERR_NOMEM, "staging area: %d outgrown areas still in use",
                               cc->nretired);
    size_t want = stage_grow(cc->stage_bytes, bytes);
    void *p;
    BRAID_CHECK(braid_cuda_host_alloc(&p, want));
    if (pending && cc->stage)
        cc->retired[cc->nretired++] = cc->stage;
    else
        braid_cuda_host_free(cc->stage);
    cc->stage = p;
    cc->stage_bytes = want;
    return BRAID_SUCCESS;
}

/* Where a staged call's buffers go in the staging area. */
typedef struct {
    size_t in_bytes, out_bytes, in_at, need;
    int has_in, has_out, in_inside;
} stage_layout_t;

static stage_layout_t stage_layout(const struct braid_comm *comm, const braid_op_args_t *a)
{
    stage_layout_t L;
    size_t es = braid_dtype_size(a->dtype), n = (size_t)comm->nranks;
    size_t bytes = a->count * es;
    L.in_bytes = a->coll == BRAID_COLL_REDUCE_SCATTER ? bytes * n : bytes;
    L.out_bytes = a->coll == BRAID_COLL_ALLGATHER ? bytes * n : bytes;
    int rooted = a->coll == BRAID_COLL_BROADCAST || a->coll == BRAID_COLL_REDUCE;
    int root = rooted && comm->rank == a->root;
    L.has_in = a->sendbuf && (a->coll != BRAID_COLL_BROADCAST || root);
    L.has_out = a->recvbuf && (a->coll != BRAID_COLL_REDUCE || root);
    const char *sb = a->sendbuf;
    const char *rb = a->recvbuf;
    /* Host images of the buffers: the output first, then the input unless it lies inside the
     * output (in place: same address, or this rank's block of it). */
    L.in_at = L.out_bytes; /* offset of the input image in the staging area */
    L.in_inside = 0;
    if (L.has_in && L.has_out && sb >= rb && sb + L.in_bytes <= rb + L.out_bytes) {
        L.in_at = (size_t)(sb - rb);
        L.in_inside = 1;
    } else if (L.has_in && L.has_out && rb >= sb && rb + L.out_bytes <= sb + L.in_bytes) {
        /* reduce-scatter in place: the output is this rank's block of the input */
        L.in_at = 0;
        L.in_inside = 2;
    }
    L.need = L.in_inside ? (L.in_inside == 2 ? L.in_bytes : L.out_bytes) : L.out_bytes + L.in_bytes;
    return L;
}

/* The caller's thread of a stream-ordered call. The worker may be running an earlier staged
 * call under cc->lock, whose ticket the user's stream waits for; a pinned allocation made
 * under the lock could wait for that stream, and so for the lock: it is made outside. */
braid_result_t braid_cuda_stage_prepare(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    stage_layout_t L = stage_layout(comm, a);
    pthread_mutex_lock(&cc->lock);
    braid_result_t res = stage_reserve(cc, 0); /* the copy stream; frees retired areas */
    size_t have = cc->stage_bytes;
    pthread_mutex_unlock(&cc->lock);
    if (res < 0 || have >= L.need) return res;
    size_t want = stage_grow(have, L.need);
    void *p;
    BRAID_CHECK(braid_cuda_host_alloc(&p, want));
    pthread_mutex_lock(&cc->lock);
    if (cc->stage_bytes >= want || cc->nretired == BRAID_CUDA_MAX_RETIRED) {
        int enough = cc->stage_bytes >= L.need, nretired = cc->nretired;
        pthread_mutex_unlock(&cc->lock);
        braid_cuda_host_free(p); /* nothing waits on this area */
        return enough ? BRAID_SUCCESS
                      : braid_set_error(BRAID_ERR_NOMEM,
                                        "staging area: %d outgrown areas still in use", nretired);
    }
    /* The old area may be in use by the running call: retired, freed once nothing is pending. */
    if (cc->stage) cc->retired[cc->nretired++] = cc->stage;
    cc->stage = p;
    cc->stage_bytes = want;
    pthread_mutex_unlock(&cc->lock);
    return BRAID_SUCCESS;
}

/* Queued device calls (non-blocking, or behind queued operations; stream.c does the same for
 * the stream-ordered ones): on the caller's thread, before the worker runs anything of them,
 * the engine's setup or the staging area's growth, which the worker must not do while a
 * stream-ordered call may hold a user stream (above). */
braid_result_t braid_cuda_prepare_queued(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc)
        return braid_set_error(BRAID_ERR_INTERNAL, "%s: device buffers on a comm without CUDA",
                               braid_coll_name(a->coll));
    int prev;
    BRAID_CHECK(braid_cuda_device_enter(cc->dev, &prev));
    int eng = braid_cuda_engine_prepare(comm, a);
    braid_result_t res = eng < 0 ? eng : eng ? BRAID_SUCCESS : braid_cuda_stage_prepare(comm, a);
    braid_cuda_device_restore(prev, cc->dev);
    return res;
}

static braid_result_t run_blocking(struct braid_comm *comm, const braid_op_args_t *a);

/* On the communicator's device; the caller's current device is restored (braid never leaves a
 * thread's device switched). */
braid_result_t braid_cuda_run_blocking(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc)
        return braid_set_error(BRAID_ERR_INTERNAL, "%s: device buffers on a comm without CUDA",
                               braid_coll_name(a->coll));
    int prev;
    if (braid_cuda_device_enter(cc->dev, &prev) < 0)
        return braid_set_error(BRAID_ERR_SYSTEM, "%s: cannot select CUDA device %d",
                               braid_coll_name(a->coll), cc->dev);
    braid_result_t res = run_blocking(comm, a);
    braid_cuda_device_restore(prev, cc->dev);
    return res;
}

static braid_result_t run_blocking(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    /* The device engine when it applies (executor.c), else staged here. */
    int eng = braid_cuda_engine_try(comm, a);
    if (eng != BRAID_INPROGRESS) return eng;
    stage_layout_t L = stage_layout(comm, a);
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    braid_result_t res;
    int ran = 0;
    pthread_mutex_lock(&cc->lock);
    BRAID_CHECK_GOTO(stage_reserve(cc, L.need), res, out);
    char *base = cc->stage;
    braid_op_args_t h = *a;
    h.on_device = 0;
    if (L.in_inside == 2) {
        h.sendbuf = L.has_in ? base : NULL;
        h.recvbuf = L.has_out ? base + (rb - sb) : NULL;
    } else {
        h.recvbuf = L.has_out ? base : NULL;
        h.sendbuf = L.has_in ? base + L.in_at : NULL;
    }
    if (L.has_in)
        BRAID_CHECK_GOTO(braid_cuda_memcpy((void *)h.sendbuf, sb, L.in_bytes, cc->copy_stream), res,
                         out);
    ran = 1;
    res = braid_coll_execute(comm, &h); /* records its own failures */
    if (res == BRAID_SUCCESS && L.has_out) {
        res = braid_cuda_memcpy(rb, h.recvbuf, L.out_bytes, cc->copy_stream);
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
