/* The device engine's executor: collectives on device buffers run by the GPU, every byte moved
 * by the engine kernel (engine.cu: engine_dev.h's protocol over the plans of algos/, the same
 * as the CPU engine's), between the ranks of one host through the CUDA IPC transport
 * (transport/cuda_ipc.c: each rank's FIFOs in its device memory, the peers' kernels write
 * into them).
 *
 * When: on a communicator whose ranks are all on one host and all have a CUDA device
 * (the peers' infos from init), for every dtype but float8 and every op but PreMulSum
 * (those, and communicators spanning hosts, are staged through host memory and the CPU engine:
 * stage.c). Avg of float16/bfloat16 is the sum of inputs pre-scaled by 1/nranks (as on the
 * host, core/redop.h): a kernel scales the input first (braid_dev_call_avg_prescale).
 * BRAID_DEV_ENGINE=stage always stages; =device makes "not applicable" an error.
 *
 * Setup (collective, at the first collective on device buffers, which every rank calls by the
 * collective contract): each rank allocates and exports its region, allgathers the infos with
 * its BRAID_DEV_* shape through the bootstrap, maps the peers' regions, and allgathers whether
 * that worked; so every rank makes the same choice (engine or staging), whatever failed where.
 *
 * A call: the plan is expanded into the lanes' steps on the host (devplan.c), the launch image
 * is copied to the device, and the host loop (devdrive.c) launches the kernel on the
 * communicator's stream until every lane is done; each launch returns once every lane is done
 * or waited `BRAID_DEV_SPINS` polls, so no kernel spins forever on a peer that is not running
 * (processes time-sliced on one GPU). Between launches the loop checks braid_comm_abort, dead
 * peers (pids: all ranks are on this host), errors the bootstrap forwarded, and the timeout.
 * A failing rank sets the in-band abort word of every FIFO it shares, so its peers' kernels stop
 * with a "peer failed" error instead of waiting for the timeout. */
#include "algos/algo.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"
#include "cuda/cuda.h"
#include "cuda/cuda_comm.h"
#include "cuda/devdrive.h"
#include "cuda/devplan.h"
#include "cuda/engine_launch.h"
#include "cuda/reduce_dev.h"
#include "core/worker.h"
#include "transport/cuda_ipc.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct braid_cuda_engine {
    braid_dev_layout_t L;
    int threads;
    uint64_t budget;
    void *region;                       /* this rank's (device memory) */
    char *regions[BRAID_DEV_MAX_LINKS]; /* every rank's, as this process addresses it */
    int opened[BRAID_DEV_MAX_LINKS];    /* mapped with cudaIpcOpenMemHandle */
    braid_dev_counters_t ctr;           /* FIFO counters carried between calls */
    uint64_t *abort_h, *abort_d;        /* this rank's abort word (mapped pinned) */
    braid_dev_report_t *rep_h, *rep_d;  /* lane reports (mapped pinned) */
    uint64_t *one;                      /* pinned 1 (in-band abort writes) */
    void *img_d, *img_pin;              /* the launch image on the device and its staging */
    size_t img_cap, pin_cap;
    void *scratch_d;
    size_t scratch_cap;
    void *pre_d; /* a pre-scaled avg's input (reduce.h), where it is not the receive buffer */
    size_t pre_cap;
    cudaStream_t stream;
    cudaEvent_t ev;
    cudaStream_t side; /* the in-band abort writes (never queued behind a stuck kernel) */
    int dead;          /* a kernel did not return: no more launches (see launch) */
    struct braid_comm *comm;
    int nlanes;                      /* lanes of the call in progress */
    uint64_t calls, launches, idles; /* statistics */
    uint64_t next_check_ns;
};

/* What the ranks allgather at setup. */
typedef struct {
    braid_cuda_ipc_info_t ipc;
    int32_t nch, nblk, nslots, threads;
    uint64_t slot_bytes;
} setup_info_t;

static int64_t param(const char *name, int64_t dflt)
{
    int64_t v;
    return braid_param_int(name, &v) == BRAID_SUCCESS ? v : dflt;
}

static int mode_device(void)
{
    return !strcasecmp(braid_param_str("DEV_ENGINE"), "device");
}

/* The bound of every wait for the engine's streams (never unbounded: a kernel queued behind a
 * held user stream may not run for as long as that stream is held). */
static double drain_bound(const struct braid_cuda_engine *e)
{
    return (e->comm ? e->comm->timeout_s : 30.0) + 10.0;
}

/* Drains the engine's streams first (a kernel still queued stops at its next wait: the abort
 * word is set), bounded; only then unmaps and frees what a kernel could touch. When the drain
 * fails, every device and pinned resource is leaked, with a warning: a kernel that ran later
 * against unmapped or freed memory would poison the application's whole CUDA context. */
static void engine_release(struct braid_cuda_engine *e)
{
    if (!e) return;
    if (e->abort_h) __atomic_store_n(e->abort_h, 1, __ATOMIC_RELEASE);
    braid_result_t res = BRAID_SUCCESS;
    if (e->stream)
        res = braid_cuda_stream_drain(e->stream, drain_bound(e), NULL,
                                      "device engine: draining its stream at release");
    if (res == BRAID_SUCCESS && e->side)
        res = braid_cuda_stream_drain(e->side, drain_bound(e), NULL,
                                      "device engine: draining its abort stream at release");
    if (res < 0) {
        braid_warn(INIT, "%s: its region, peer mappings, pinned words and streams are leaked",
                   braid_last_error());
        free(e->img_pin);
        free(e);
        return;
    }
    if (e->img_d) cudaFreeAsync(e->img_d, e->stream);
    if (e->scratch_d) cudaFreeAsync(e->scratch_d, e->stream);
    if (e->pre_d) cudaFreeAsync(e->pre_d, e->stream);
    if (e->stream)
        (void)braid_cuda_stream_drain(e->stream, drain_bound(e), NULL,
                                      "device engine: freeing its buffers");
    for (int r = 0; r < BRAID_DEV_MAX_LINKS; r++)
        braid_cuda_ipc_region_close(e->regions[r], e->opened[r]);
    braid_cuda_ipc_region_free(e->region);
    if (e->abort_h) cudaFreeHost(e->abort_h);
    if (e->rep_h) cudaFreeHost(e->rep_h);
    if (e->one) cudaFreeHost(e->one);
    free(e->img_pin);
    if (e->ev) cudaEventDestroy(e->ev);
    if (e->stream) cudaStreamDestroy(e->stream);
    if (e->side) cudaStreamDestroy(e->side);
    (void)cudaGetLastError();
    free(e);
}

void braid_cuda_engine_free(struct braid_comm *comm)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc) return;
    engine_release(cc->eng);
    cc->eng = NULL;
}

static braid_result_t cuda_err(cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return braid_set_error(BRAID_ERR_SYSTEM, "device engine: %s: %s", what, cudaGetErrorString(e));
}

/* This rank's part of the setup: the local resources and the region (no communication). */
static braid_result_t setup_local(struct braid_comm *comm, struct braid_cuda_engine *e,
                                  setup_info_t *mine)
{
    int n = comm->nranks;
    mine->nch = (int32_t)param("DEV_NCHANNELS", 4);
    mine->nblk = (int32_t)param("DEV_BLOCKS", 2);
    mine->nslots = (int32_t)param("DEV_NSLOTS", 8);
    mine->threads = (int32_t)param("DEV_THREADS", 512);
    mine->slot_bytes = (uint64_t)param("DEV_CHUNK_SIZE", 524288);
    e->budget = (uint64_t)param("DEV_SPINS", 16384);
    e->threads = mine->threads;
    if (!strcasecmp(braid_param_str("DEV_ENGINE"), "stage"))
        return braid_set_error(BRAID_ERR_UNSUPPORTED, "BRAID_DEV_ENGINE=stage");
    /* A bad value is this rank's "unavailable", agreed with the peers like any setup failure:
     * staged (or an error naming it under BRAID_DEV_ENGINE=device), never a failed launch. */
    BRAID_CHECK(braid_dev_threads_check(mine->threads));
    BRAID_CHECK(braid_dev_layout_init(&e->L, n, mine->nch, mine->nblk, mine->nslots,
                                      mine->nslots < 2 ? mine->nslots : 2,
                                      (size_t)mine->slot_bytes));
    cudaError_t ce;
    /* Non-blocking: the legacy default stream must not order the engine's work (a user's
     * blocking stream held by a stream-ordered call would hold it too). */
    if ((ce = cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_err(ce, "stream");
    if ((ce = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_err(ce, "event");
    if ((ce = cudaStreamCreateWithFlags(&e->side, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_err(ce, "abort stream");
    /* What would otherwise happen lazily on the worker, where a held user stream would wait
     * for it (see stream.c): the kernel's module is loaded and the stream-ordered allocator's
     * pool set up here, before any stream-ordered call holds a stream. This explains, we
     * think, the stream-ordered hangs of fresh processes on the H200 (perf/RESULTS.md, GPU):
     * threads that had run blocking calls first did not hang. Not yet checked on a GPU. */
    if ((ce = (cudaError_t)braid_cuda_engine_preload()) != cudaSuccess)
        return cuda_err(ce, "loading the engine kernel");
    void *warm = NULL;
    if ((ce = cudaMallocAsync(&warm, 4096, e->stream)) != cudaSuccess ||
        (ce = cudaFreeAsync(warm, e->stream)) != cudaSuccess)
        return cuda_err(ce, "the stream-ordered allocator");
    BRAID_CHECK(braid_cuda_stream_drain(e->stream, drain_bound(e), &comm->aborted,
                                        "device engine: setting up the stream-ordered allocator"));
    void *d = NULL;
    size_t rep_bytes = BRAID_DEV_MAX_LANES * sizeof(braid_dev_report_t);
    if ((ce = cudaHostAlloc((void **)&e->abort_h, 64, cudaHostAllocMapped)) != cudaSuccess ||
        (ce = cudaHostGetDevicePointer(&d, e->abort_h, 0)) != cudaSuccess)
        return cuda_err(ce, "mapped abort word");
    e->abort_d = d;
    memset(e->abort_h, 0, 64);
    if ((ce = cudaHostAlloc((void **)&e->rep_h, rep_bytes, cudaHostAllocMapped)) != cudaSuccess ||
        (ce = cudaHostGetDevicePointer(&d, e->rep_h, 0)) != cudaSuccess)
        return cuda_err(ce, "mapped lane reports");
    e->rep_d = d;
    if ((ce = cudaMallocHost((void **)&e->one, sizeof(uint64_t))) != cudaSuccess)
        return cuda_err(ce, "pinned word");
    *e->one = 1;
    return braid_cuda_ipc_region_alloc(e->L.region_bytes, e->stream, drain_bound(e), &e->region,
                                       &mine->ipc);
}

/* What rules the engine out from the peers' infos alone: the same answer on every rank. */
static const char *ruled_out(const struct braid_comm *comm)
{
    int n = comm->nranks;
    for (int r = 0; r < n; r++) {
        if (strcmp(comm->peers[r].host, comm->peers[0].host)) return "the ranks span several hosts";
        if (comm->peers[r].cuda_dev < 0) return "a rank has no CUDA device";
    }
    return n + 1 > BRAID_DEV_MAX_LINKS ? "more than 65 ranks" : NULL;
}

/* The collective setup; on return cc->eng_state is 1 (ready) or -1 (eng_why says why) on every
 * rank alike, unless the bootstrap itself failed (then the error is returned). */
static braid_result_t engine_setup(struct braid_comm *comm, struct braid_cuda_comm *cc)
{
    int n = comm->nranks;
    const char *why = ruled_out(comm);
    if (why) { /* from the peers' infos: the same answer on every rank, no exchange needed */
        snprintf(cc->eng_why, sizeof(cc->eng_why), "%s", why);
        cc->eng_state = -1;
        return BRAID_SUCCESS;
    }
    struct braid_cuda_engine *e = calloc(1, sizeof(*e));
    setup_info_t *all = calloc((size_t)n, sizeof(*all));
    int32_t *oks = calloc((size_t)n, sizeof(*oks));
    braid_result_t res = BRAID_SUCCESS;
    if (!e || !all || !oks) {
        free(e);
        free(all);
        free(oks);
        return braid_set_error(BRAID_ERR_NOMEM, "device engine: out of memory");
    }
    e->comm = comm;
    setup_info_t mine;
    memset(&mine, 0, sizeof(mine));
    if (setup_local(comm, e, &mine) < 0) {
        mine.ipc.ok = 0;
        snprintf(mine.ipc.why, sizeof(mine.ipc.why), "%s", braid_last_error());
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, &mine, all, sizeof(mine)), res, fail);
    char agree[200] = "";
    for (int r = 0; r < n && !agree[0]; r++) {
        if (!all[r].ipc.ok)
            snprintf(agree, sizeof(agree), "rank %d: %s", r, all[r].ipc.why);
        else if (all[r].nch != mine.nch || all[r].nblk != mine.nblk ||
                 all[r].nslots != mine.nslots || all[r].slot_bytes != mine.slot_bytes)
            snprintf(agree, sizeof(agree), "BRAID_DEV_* differ between rank %d and rank %d", r,
                     comm->rank);
    }
    int32_t ok = !agree[0];
    for (int r = 0; ok && r < n; r++) {
        if (r == comm->rank) {
            e->regions[r] = e->region;
            continue;
        }
        void *p = NULL;
        if (braid_cuda_ipc_region_open(&all[r].ipc, r, &p, &e->opened[r]) < 0) {
            ok = 0;
            snprintf(agree, sizeof(agree), "rank %d: %s", comm->rank, braid_last_error());
            break;
        }
        e->regions[r] = p;
    }
    BRAID_CHECK_GOTO(braid_boot_allgather(comm->boot, &ok, oks, sizeof(ok)), res, fail);
    for (int r = 0; r < n && ok; r++)
        if (!oks[r]) {
            ok = 0;
            snprintf(agree, sizeof(agree), "rank %d could not map its peers' regions", r);
        }
    if (!ok) {
        snprintf(cc->eng_why, sizeof(cc->eng_why), "%s", agree);
        cc->eng_state = -1;
        braid_info(INIT, "device engine unavailable (%s): device buffers are staged", agree);
        engine_release(e);
    } else {
        cc->eng = e;
        cc->eng_state = 1;
        braid_info(INIT,
                   "device engine ready: %d ranks, %d channels x %d blocks of %d threads, %d "
                   "slots of %zu B, region %zu B",
                   n, e->L.nch, e->L.nblk, e->threads, e->L.nslots, e->L.slot_bytes,
                   e->L.region_bytes);
    }
    free(all);
    free(oks);
    return BRAID_SUCCESS;
fail:
    engine_release(e);
    free(all);
    free(oks);
    cc->eng_state = -1;
    snprintf(cc->eng_why, sizeof(cc->eng_why), "setup failed: %s", braid_last_error());
    return res;
}

/* Grows a buffer of the engine's calls: device memory from the stream-ordered allocator on
 * the engine's stream (cudaMalloc/cudaFree would synchronise with the device, and so wait
 * forever for a user stream that a stream-ordered call holds), or pageable host memory (the
 * launch image's host copy: uploaded with cudaMemcpyAsync, which copies it before returning). */
static braid_result_t grow_dev(struct braid_cuda_engine *e, void **p, size_t *cap, size_t bytes,
                               int host)
{
    if (*cap >= bytes) return BRAID_SUCCESS;
    size_t want = *cap ? *cap : 65536;
    while (want < bytes)
        want *= 2;
    void *q = NULL;
    if (host) {
        q = malloc(want);
        if (!q) return braid_set_error(BRAID_ERR_NOMEM, "device engine: out of memory");
        free(*p);
    } else {
        cudaError_t ce = cudaMallocAsync(&q, want, e->stream);
        if (ce != cudaSuccess) return cuda_err(ce, "device buffer");
        if (*p) cudaFreeAsync(*p, e->stream);
    }
    *p = q;
    *cap = want;
    return BRAID_SUCCESS;
}

/* ---- the host loop's callbacks (devdrive.h) ----------------------------------------------- */
static braid_result_t launch(void *ctx, uint64_t budget)
{
    struct braid_cuda_engine *e = ctx;
    struct braid_comm *comm = e->comm;
    int rc = braid_cuda_engine_launch(e->img_d, e->nlanes, e->threads, budget, e->stream);
    if (rc != 0) return cuda_err((cudaError_t)rc, "kernel launch");
    cudaError_t ce = cudaEventRecord(e->ev, e->stream);
    if (ce != cudaSuccess) return cuda_err(ce, "event record");
    uint64_t t0 = braid_now_ns(), limit = braid_timeout_ns(comm->timeout_s + 10.0);
    unsigned k = 0;
    for (;;) {
        ce = cudaEventQuery(e->ev);
        if (ce == cudaSuccess) return BRAID_SUCCESS;
        if (ce != cudaErrorNotReady) return cuda_err(ce, "the engine kernel failed");
        if (atomic_load(&comm->aborted)) __atomic_store_n(e->abort_h, 1, __ATOMIC_RELEASE);
        if (braid_now_ns() - t0 > limit) {
            /* The kernel is still queued or running: its own abort word stops it at its next
             * wait, and the engine launches nothing more (engine_run drains it, bounded). */
            __atomic_store_n(e->abort_h, 1, __ATOMIC_RELEASE);
            e->dead = 1;
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "device engine: a kernel launch did not return in %.0f s",
                                   comm->timeout_s + 10.0);
        }
        if (++k < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

/* 0 when pid is gone or a zombie (killed, not reaped yet), else 1. */
static int pid_alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT ? 0 : 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return !(rp && rp[1] && (rp[2] == 'Z' || rp[2] == 'X'));
}

static braid_result_t check(void *ctx)
{
    struct braid_cuda_engine *e = ctx;
    struct braid_comm *comm = e->comm;
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "device engine: %s",
                               braid_comm_abort_reason(comm));
    uint64_t now = braid_now_ns();
    if (now < e->next_check_ns) return BRAID_SUCCESS;
    e->next_check_ns = now + 50000000ull;
    for (int r = 0; r < comm->nranks; r++) {
        pid_t pid = (pid_t)comm->peers[r].pid;
        if (r != comm->rank && pid > 0 && !pid_alive(pid))
            return braid_set_error(
                BRAID_ERR_REMOTE, "device engine: rank %d (pid %d on this host) died", r, (int)pid);
    }
    if (comm->boot) BRAID_CHECK(braid_boot_poll_error(comm->boot));
    return BRAID_SUCCESS;
}

static void idle(void *ctx, unsigned n)
{
    (void)ctx;
    if (n < 4) return; /* relaunch at once: the peers may just be a launch behind */
    if (n < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, n < 1024 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

/* After a failure: every FIFO this rank shares gets its in-band abort word set, on the side
 * stream (the engine's may hold a kernel that does not return), waited for with a bound. */
static void abort_fifos(struct braid_cuda_engine *e, const braid_dev_image_t *img)
{
    const braid_dev_chan_t *chans = braid_dev_image_chans(img);
    for (int l = 0; l < img->nlanes; l++)
        for (int k = 0; k < BRAID_DEV_MAX_LINKS; k++)
            for (int dir = 0; dir < 2; dir++) {
                braid_dev_fifo_t *fd = dir ? chans[l].recv[k] : chans[l].send[k];
                if (!fd) continue;
                const braid_dev_fifo_t *f =
                    (const braid_dev_fifo_t *)(void *)(img->host + ((uintptr_t)fd - img->base));
                cudaMemcpyAsync(&f->ctl->abort, e->one, sizeof(uint64_t), cudaMemcpyHostToDevice,
                                e->side);
            }
    (void)cudaGetLastError();
    double bound = e->comm->timeout_s < 5.0 ? e->comm->timeout_s : 5.0;
    if (braid_cuda_stream_drain(e->side, bound, NULL, "device engine: writing the in-band aborts") <
        0)
        braid_warn(COLL, "%s (the peers learn of the failure through the bootstrap)",
                   braid_last_error());
}

static int choose_plan(const struct braid_comm *comm, const braid_op_args_t *a)
{
    size_t bytes = a->count * braid_dtype_size(a->dtype);
    if (comm->nranks > 1 && a->coll == BRAID_COLL_ALLREDUCE &&
        (comm->algo == BRAID_ALGO_RECDBL ||
         (comm->algo < 0 && comm->nranks >= 4 && bytes <= ((size_t)32 << 10))))
        return BRAID_PLAN_RECDBL;
    if (comm->nranks > 1 && comm->algo == BRAID_ALGO_TREE &&
        (a->coll == BRAID_COLL_BROADCAST || a->coll == BRAID_COLL_REDUCE))
        return BRAID_PLAN_TREE;
    return BRAID_PLAN_RING;
}

static braid_result_t engine_run(struct braid_comm *comm, struct braid_cuda_engine *e,
                                 const braid_op_args_t *a, uint32_t seq)
{
    char what[96];
    snprintf(what, sizeof(what), "%s #%u (device engine)", braid_coll_name(a->coll), seq);
    braid_dev_call_t call = {.coll = a->coll,
                             .algo = choose_plan(comm, a),
                             .dtype = a->dtype,
                             .op = a->op,
                             .root = a->root,
                             .count = a->count,
                             .sendbuf = a->sendbuf,
                             .recvbuf = a->recvbuf,
                             .seq = seq,
                             .order = comm->ring_order};
    size_t es = braid_dtype_size(a->dtype);
    int into_recv;
    size_t n_pre = braid_dev_call_avg_prescale(&call, comm->nranks, comm->rank, &into_recv);
    if (n_pre) { /* a float16/bfloat16 avg: the input times 1/nranks on the stream, then summed */
        if (!into_recv) BRAID_CHECK(grow_dev(e, &e->pre_d, &e->pre_cap, n_pre * es, 0));
        void *dst = into_recv ? a->recvbuf : e->pre_d;
        int ce = braid_cuda_reduce_launch((int)a->dtype, BRAID_CUDA_K_PRE, dst, a->sendbuf,
                                          a->sendbuf, n_pre, comm->nranks, e->stream);
        if (ce != 0) return cuda_err((cudaError_t)ce, "avg pre-scaling");
        call.sendbuf = dst;
    }
    if (braid_dev_call_needs_scratch(&call, comm->nranks, comm->rank)) {
        BRAID_CHECK(grow_dev(e, &e->scratch_d, &e->scratch_cap, a->count * es, 0));
        call.scratch = e->scratch_d;
    }
    braid_dev_image_t img;
    BRAID_CHECK(braid_dev_image_build(&e->L, comm->rank, &call, e->regions, &e->ctr, e->abort_d,
                                      e->rep_d, &img));
    braid_result_t res = grow_dev(e, &e->img_d, &e->img_cap, img.bytes, 0);
    if (res == BRAID_SUCCESS) res = grow_dev(e, &e->img_pin, &e->pin_cap, img.bytes, 1);
    if (res < 0) {
        braid_dev_image_free(&img);
        return res;
    }
    braid_dev_image_relocate(&img, (uintptr_t)e->img_d);
    memcpy(e->img_pin, img.host, img.bytes);
    braid_dev_reports_reset(e->rep_h, img.nlanes);
    e->nlanes = img.nlanes;
    cudaError_t ce =
        cudaMemcpyAsync(e->img_d, e->img_pin, img.bytes, cudaMemcpyHostToDevice, e->stream);
    if (ce != cudaSuccess) {
        braid_dev_image_free(&img);
        return cuda_err(ce, "image upload");
    }
    static const braid_dev_drive_ops_t ops = {.launch = launch, .check = check, .idle = idle};
    braid_dev_drive_t d = {.rank = comm->rank,
                           .nranks = comm->nranks,
                           .nblk = e->L.nblk,
                           .order = comm->ring_order,
                           .what = what,
                           .timeout_s = comm->timeout_s,
                           .budget = e->budget,
                           .nlanes = img.nlanes,
                           .seq = seq,
                           .reports = e->rep_h};
    res = braid_dev_drive(&d, &ops, e);
    e->launches += d.runs;
    e->idles += d.idles;
    if (res == BRAID_SUCCESS) {
        /* The counters the next call continues from. */
        size_t cb = (size_t)img.nlanes * sizeof(braid_dev_chan_t);
        ce = cudaMemcpyAsync(e->img_pin, e->img_d, cb, cudaMemcpyDeviceToHost, e->stream);
        if (ce != cudaSuccess)
            res = cuda_err(ce, "reading the lanes back");
        else if ((res = braid_cuda_stream_drain(e->stream, drain_bound(e), NULL,
                                                "device engine: reading the lanes back")) < 0)
            e->dead = 1;
        else
            braid_dev_image_save(&img, e->img_pin, &e->ctr);
        braid_trace(COLL, "%s: %llu launches, %llu idle", what, (unsigned long long)d.runs,
                    (unsigned long long)d.idles);
        e->calls++;
    }
    if (res < 0) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", braid_last_error());
        abort_fifos(e, &img);
        /* A kernel that did not return reads and writes the user's buffers until it stops:
         * the call returns once it has (its abort word is set), or leaves the engine dead. */
        if (e->dead &&
            braid_cuda_stream_drain(e->stream, drain_bound(e), NULL,
                                    "device engine: stopping a kernel that did not return") < 0)
            braid_warn(COLL, "%s: the device engine of this communicator is stopped",
                       braid_last_error());
        braid_restore_error(saved);
    }
    braid_dev_image_free(&img);
    return res;
}

static int engine_runs(const braid_op_args_t *a)
{
    return !a->premul && a->dtype < BRAID_FLOAT8_E4M3 && a->coll != BRAID_COLL_BARRIER;
}

int braid_cuda_engine_will_run(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!cc || !engine_runs(a) || !a->count) return 0;
    int state = __atomic_load_n(&cc->eng_state, __ATOMIC_ACQUIRE);
    if (state) return state > 0;
    /* Not set up yet: the setup may still find it unavailable (it agrees on that across the
     * ranks), but this rank cannot know before the call: may run. */
    return strcasecmp(braid_param_str("DEV_ENGINE"), "stage") && !ruled_out(comm);
}

int braid_cuda_engine_prepare(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    if (!engine_runs(a)) return 0;
    if (cc->eng_state == 0 && a->count) {
        /* The setup is collective and runs in call order: after the queued operations. */
        uint64_t t0 = braid_now_ns(), limit = braid_timeout_ns(comm->timeout_s);
        while (braid_worker_pending(comm) > 0) {
            if (atomic_load(&comm->aborted))
                return braid_set_error(BRAID_ERR_ABORTED, "%s_stream: %s", braid_coll_name(a->coll),
                                       braid_comm_abort_reason(comm));
            if (braid_now_ns() - t0 > limit)
                return braid_set_error(BRAID_ERR_TIMEOUT,
                                       "%s_stream: the operations queued before it did not finish "
                                       "in %.1f s",
                                       braid_coll_name(a->coll), comm->timeout_s);
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        BRAID_CHECK(engine_setup(comm, cc)); /* on cc->dev: the callers select it */
    }
    return cc->eng_state > 0;
}

int braid_cuda_engine_try(struct braid_comm *comm, const braid_op_args_t *a)
{
    struct braid_cuda_comm *cc = comm->cuda;
    const char *name = braid_coll_name(a->coll);
    int want = mode_device();
    if (!engine_runs(a)) {
        if (!want) return BRAID_INPROGRESS;
        return braid_set_error(BRAID_ERR_UNSUPPORTED,
                               "%s: BRAID_DEV_ENGINE=device, but the device engine does not run "
                               "%s",
                               name, a->premul ? "PreMulSum ops" : "float8 dtypes");
    }
    if (cc->eng_state == 0 && a->count) {
        braid_result_t res = engine_setup(comm, cc);
        if (res < 0) return res;
    }
    if (cc->eng_state == 0) return BRAID_INPROGRESS; /* count 0 before the setup: staged */
    if (cc->eng_state < 0) {
        if (!want) return BRAID_INPROGRESS;
        return braid_set_error(BRAID_ERR_UNSUPPORTED,
                               "%s: BRAID_DEV_ENGINE=device, but the device engine is unavailable "
                               "on this communicator: %s",
                               name, cc->eng_why);
    }
    uint32_t seq = ++comm->seq;
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "%s #%u: %s", name, seq,
                               braid_comm_abort_reason(comm));
    int err = atomic_load(&comm->error);
    if (err) return braid_set_error(err, "communicator failed earlier: %s", comm->errmsg);
    if (cc->eng->dead)
        return braid_set_error(BRAID_ERR_SYSTEM,
                               "%s #%u: the device engine stopped after a kernel launch did not "
                               "return",
                               name, seq);
    if (!a->count) return BRAID_SUCCESS; /* nothing moves; every rank counted the call */
    braid_result_t res = engine_run(comm, cc->eng, a, seq);
    if (res < 0) braid_comm_fail_call(comm, res);
    return res;
}

void braid_cuda_engine_stats(struct braid_comm *comm, uint64_t *calls_p, uint64_t *launches_p,
                             uint64_t *idle_p, const char **why_p)
{
    struct braid_cuda_comm *cc = comm->cuda;
    struct braid_cuda_engine *e = cc ? cc->eng : NULL;
    *calls_p = e ? e->calls : 0;
    *launches_p = e ? e->launches : 0;
    *idle_p = e ? e->idles : 0;
    if (why_p)
        *why_p = e                    ? NULL
                 : !cc                ? "no CUDA device"
                 : cc->eng_state == 0 ? "not tried yet (no collective on device buffers)"
                                      : cc->eng_why;
}
