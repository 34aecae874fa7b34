/* Stream-ordered collectives (braid_<coll>_stream) with host-driven progress.
 *
 * The call enqueues, on the user's stream: an event (the point after which the inputs are
 * ready) and a wait in the GPU's front end, cuStreamWaitValue64(flag >= ticket), on a counter
 * in pinned, device-mapped host memory; it then queues a request on the communicator's worker
 * thread and returns. The worker (in call order with every other operation of the comm) waits
 * for the event, runs the collective (stage.c today; the device engine's kernels on the
 * worker's own stream when it runs plans on the GPU), and stores the ticket into the counter,
 * which releases the user's stream. No kernel ever waits for another process: the user's
 * stream waits in the front end, not on an SM, and ranks of different processes sharing a GPU
 * (time-sliced without MPS) make progress whenever their worker threads run.
 *
 * Errors: a failed operation still stores its ticket (the stream never hangs); the error is
 * the communicator's sticky async error (braid_comm_get_error), and the next call on the
 * communicator returns it. Timeouts and braid_comm_abort end the worker's waits as everywhere.
 *
 * Driver functions come through cudaGetDriverEntryPointByVersion (libbraid never links
 * libcuda). */
#include "core/comm.h"
#include "core/log.h"
#include "core/worker.h"
#include "cuda/cuda.h"
#include "cuda/cuda_comm.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

static pthread_once_t fn_once = PTHREAD_ONCE_INIT;
static wait_value_fn fn_wait64;
static char fn_why[160];

static void load_fns(void)
{
    void *p = NULL;
    enum cudaDriverEntryPointQueryResult q;
    cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        snprintf(fn_why, sizeof(fn_why), "cuStreamWaitValue64 is not available (%s)",
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        return;
    }
    fn_wait64 = (wait_value_fn)p;
}

static braid_result_t flag_init(struct braid_cuda_comm *cc)
{
    if (cc->flag) return BRAID_SUCCESS;
    void *h = NULL, *d = NULL;
    cudaError_t e = cudaHostAlloc(&h, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        if (h) cudaFreeHost(h);
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_SYSTEM, "cannot map the stream counter: %s",
                               cudaGetErrorString(e));
    }
    memset(h, 0, 64);
    cc->flag = h;
    cc->flag_dev = (uint64_t)(uintptr_t)d;
    return BRAID_SUCCESS;
}

/* A stream being captured into a CUDA graph: refused. The call's progress is host-driven (the
 * worker stores the ticket once), so a captured wait would be satisfied already at every replay
 * and the collective would silently not happen, and the worker cannot query a captured event.
 * Checked before anything is allocated (an allocation would invalidate a global capture). */
static braid_result_t refuse_capture(void *stream, const char *what)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
    if (e == cudaSuccess && cs == cudaStreamCaptureStatusNone) return BRAID_SUCCESS;
    (void)cudaGetLastError();
    if (e != cudaSuccess && e != cudaErrorStreamCaptureImplicit)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: cannot query stream %p: %s", what,
                               stream, cudaGetErrorString(e));
    return braid_set_error(BRAID_ERR_UNSUPPORTED,
                           "%s: stream %p is being captured into a CUDA graph (%s): braid's "
                           "stream-ordered calls cannot be captured; call it outside the capture",
                           what, stream,
                           e != cudaSuccess ? "the legacy stream under another stream's capture"
                           : cs == cudaStreamCaptureStatusActive ? "capture active"
                                                                 : "capture invalidated");
}

static braid_result_t enqueue(struct braid_comm *comm, const braid_op_args_t *a, void *stream);

/* On the communicator's device (its event and the ticket's wait belong there), the caller's
 * current device restored. */
braid_result_t braid_cuda_enqueue(struct braid_comm *comm, const braid_op_args_t *a, void *stream)
{
    struct braid_cuda_comm *cc = comm->cuda;
    const char *name = braid_coll_name(a->coll);
    if (!cc) return braid_set_error(BRAID_ERR_INTERNAL, "%s_stream: no CUDA state", name);
    int prev;
    if (braid_cuda_device_enter(cc->dev, &prev) < 0)
        return braid_set_error(BRAID_ERR_SYSTEM, "%s_stream: cannot select CUDA device %d", name,
                               cc->dev);
    char what[64];
    snprintf(what, sizeof(what), "%s_stream", name);
    braid_result_t res = refuse_capture(stream, what);
    if (res == BRAID_SUCCESS) res = enqueue(comm, a, stream);
    braid_cuda_device_restore(prev, cc->dev);
    return res;
}

static braid_result_t enqueue(struct braid_comm *comm, const braid_op_args_t *a, void *stream)
{
    struct braid_cuda_comm *cc = comm->cuda;
    const char *name = braid_coll_name(a->coll);
    pthread_once(&fn_once, load_fns);
    if (!fn_wait64) return braid_set_error(BRAID_ERR_UNSUPPORTED, "%s_stream: %s", name, fn_why);
    braid_result_t res;
    cudaEvent_t ev = NULL;
    struct braid_request *req = calloc(1, sizeof(*req));
    if (!req) return braid_set_error(BRAID_ERR_NOMEM, "%s_stream: out of memory", name);
    pthread_mutex_lock(&cc->lock);
    res = flag_init(cc);
    pthread_mutex_unlock(&cc->lock);
    if (res < 0) goto fail;
    /* Everything that allocates (the engine's setup, the staging area) happens here, before the
     * stream is held: the worker must not allocate while it is (see stage.c). */
    if ((res = braid_coll_prepare_dev(comm, a)) < 0) goto fail;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        res = braid_set_error(BRAID_ERR_INVALID_ARG, "%s_stream: cannot record on stream %p: %s",
                              name, stream, cudaGetErrorString(e));
        goto fail;
    }
    pthread_mutex_lock(&cc->lock);
    uint64_t ticket = ++cc->next_ticket;
    pthread_mutex_unlock(&cc->lock);
    CUresult ce =
        fn_wait64((CUstream)stream, (CUdeviceptr)cc->flag_dev, ticket, CU_STREAM_WAIT_VALUE_GEQ);
    if (ce != CUDA_SUCCESS) {
        pthread_mutex_lock(&cc->lock);
        cc->next_ticket--;
        pthread_mutex_unlock(&cc->lock);
        res = braid_set_error(BRAID_ERR_SYSTEM, "%s_stream: cuStreamWaitValue64 failed (%d)", name,
                              (int)ce);
        goto fail;
    }
    req->args = *a;
    req->comm = comm;
    req->detached = 1;
    req->cuda_event = ev;
    req->cuda_ticket = ticket;
    res = braid_worker_submit(comm, req);
    if (res < 0) {
        /* The stream already waits for this ticket: release it. */
        __atomic_store_n(cc->flag, ticket, __ATOMIC_RELEASE);
        cudaEventDestroy(ev);
        free(req);
        return res;
    }
    return BRAID_SUCCESS;
fail:
    if (ev) cudaEventDestroy(ev);
    free(req);
    return res;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Polls until ev completed: bounded by the comm's timeout, ended by abort or a stopping worker. */
static braid_result_t wait_event(struct braid_comm *comm, cudaEvent_t ev, const char *what)
{
    uint64_t t0 = now_ns(), limit = braid_timeout_ns(comm->timeout_s);
    struct timespec nap = {0, 20000};
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return BRAID_SUCCESS;
        if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return braid_set_error(BRAID_ERR_SYSTEM, "%s: waiting for the stream: %s", what,
                                   cudaGetErrorString(e));
        }
        if (atomic_load(&comm->aborted) || comm->worker_stop)
            return braid_set_error(BRAID_ERR_ABORTED, "%s aborted while its stream ran", what);
        if (now_ns() - t0 > limit)
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "%s: the stream's earlier work did not finish in %.1f s", what,
                                   comm->timeout_s);
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 1000000) nap.tv_nsec *= 2;
    }
}

braid_result_t braid_cuda_run_queued(struct braid_comm *comm, struct braid_request *req)
{
    struct braid_cuda_comm *cc = comm->cuda;
    const char *name = braid_coll_name(req->args.coll);
    braid_result_t res = cudaSetDevice(cc->dev) == cudaSuccess
                             ? BRAID_SUCCESS
                             : braid_set_error(BRAID_ERR_SYSTEM,
                                               "%s_stream: cannot select device %d", name, cc->dev);
    if (res == BRAID_SUCCESS) res = wait_event(comm, (cudaEvent_t)req->cuda_event, name);
    if (res == BRAID_SUCCESS) {
        res = braid_cuda_run_blocking(comm, &req->args);
    } else {
        /* Nothing ran: record it as the comm's error and tell the peers, as a failed run does. */
        braid_comm_set_error(comm, res, "%s", braid_last_error());
        braid_comm_fail_peers(comm, res, braid_last_error());
    }
    __atomic_store_n(cc->flag, req->cuda_ticket, __ATOMIC_RELEASE);
    cudaEventDestroy((cudaEvent_t)req->cuda_event);
    req->cuda_event = NULL;
    return res;
}

braid_result_t braid_cuda_stream_wait(struct braid_comm *comm, void *stream)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc) return braid_set_error(BRAID_ERR_INTERNAL, "stream wait on a comm without CUDA");
    /* On the communicator's device (a thread may drive communicators of several devices; the
     * legacy stream and an event are per device), the caller's current device restored. */
    int prev;
    BRAID_CHECK(braid_cuda_device_enter(cc->dev, &prev));
    braid_result_t res = refuse_capture(stream, "stream-ordered call");
    if (res < 0) {
        braid_cuda_device_restore(prev, cc->dev);
        return res;
    }
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        res = braid_set_error(BRAID_ERR_INVALID_ARG,
                              "cannot record on stream %p (the communicator's device %d): %s",
                              stream, cc->dev, cudaGetErrorString(e));
    } else {
        res = wait_event(comm, ev,
                         stream ? "waiting for the caller's stream"
                                : "waiting for the legacy default stream");
    }
    if (ev) cudaEventDestroy(ev);
    braid_cuda_device_restore(prev, cc->dev);
    return res;
}
