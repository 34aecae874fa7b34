/* The CPU twin of the device engine: engine_dev.h compiled by the C compiler, its data
 * movement done by the CPU kernels of src/reduce (the same element functions as the CUDA
 * kernels), run over the GPU executor's layout, images and host loop (devplan.h, devdrive.h)
 * with every rank's region in one shared mapping. See twin.h. */
#include "cuda/twin.h"
#include "core/comm.h"
#define BRAID_DEV_ENGINE_IMPL 1
#include "cuda/engine_dev.h"
#include "core/log.h"
#include "cuda/devdrive.h"
#include "reduce/reduce.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static inline void bde_copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

static inline void bde_copy2(void *dst, void *dst2, const void *src, size_t bytes)
{
    bde_copy(dst, src, bytes);
    bde_copy(dst2, src, bytes);
}

/* The GPU's reductions load and store whole elements where the buffers are not co-aligned
 * (reduce_dev.cuh), and an element at a misaligned address is cudaErrorMisalignedAddress, fatal
 * to the process's CUDA context. The host kernels accept any address, so the twin checks what
 * the GPU needs and stops the process as the GPU would (the API refuses such buffers: the
 * argument checks, coll_dev.c). */
static void twin_aligned(const void *p, size_t es, size_t count, const char *what)
{
    if (!count || !p || (uintptr_t)p % es == 0) return;
    fprintf(stderr,
            "twin: %s %p is not aligned to its %zu-byte elements: the GPU would fault here "
            "(cudaErrorMisalignedAddress)\n",
            what, p, es);
    abort();
}

static inline void bde_reduce(const braid_dev_chan_t *ch, void *dst, const void *x, const void *y,
                              size_t count, int final)
{
    twin_aligned(dst, ch->es, count, "reduction output");
    twin_aligned(x, ch->es, count, "reduction input");
    twin_aligned(y, ch->es, count, "reduction input");
    if (final)
        braid_reduce_pair_final(ch->dtype, ch->op, dst, x, y, count, ch->nranks);
    else
        braid_reduce_pair(ch->dtype, ch->op, dst, x, y, count);
}

static inline void bde_reduce2(const braid_dev_chan_t *ch, void *dst, void *dst2, const void *x,
                               const void *y, size_t count)
{
    twin_aligned(dst2, ch->es, count, "reduction output");
    bde_reduce(ch, dst, x, y, count, 1);
    bde_copy(dst2, dst, count * ch->es);
}

static inline void bde_finalize(const braid_dev_chan_t *ch, void *dst, const void *src,
                                size_t count)
{
    if (ch->op == BRAID_AVG) { /* the division kernel (else a byte copy) */
        twin_aligned(dst, ch->es, count, "avg output");
        twin_aligned(src, ch->es, count, "avg input");
    }
    braid_reduce_finalize(ch->dtype, ch->op, dst, src, count, ch->nranks);
}

struct braid_twin_world {
    braid_dev_layout_t L;
    void *map;
    size_t map_bytes;
    char *regions[BRAID_DEV_MAX_LINKS]; /* rank r's region, in the mapping */
    uint64_t *aborts;                   /* one word per rank, in the mapping */
    braid_dev_counters_t *ctr;          /* per rank (private: each forked rank keeps its own) */
};

braid_result_t braid_twin_world_create(int nranks, int nchannels, int nblk, int nslots,
                                       size_t slot_bytes, braid_twin_world_t **w_p)
{
    braid_dev_layout_t L;
    slot_bytes = (slot_bytes + 15) & ~(size_t)15;
    BRAID_CHECK(braid_dev_layout_init(&L, nranks, nchannels, nblk, nslots, nslots, slot_bytes));
    braid_twin_world_t *w = calloc(1, sizeof(*w));
    if (w) w->ctr = calloc((size_t)nranks, sizeof(*w->ctr));
    if (!w || !w->ctr) {
        free(w);
        return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory");
    }
    w->L = L;
    size_t region = (L.region_bytes + 127) & ~(size_t)127;
    w->map_bytes = (size_t)nranks * region + 4096;
    w->map = mmap(NULL, w->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w->map == MAP_FAILED) {
        size_t bytes = w->map_bytes;
        free(w->ctr);
        free(w);
        return braid_set_error(BRAID_ERR_SYSTEM, "twin: mmap of %zu bytes: %m", bytes);
    }
    w->aborts = w->map;
    for (int r = 0; r < nranks; r++) {
        w->regions[r] = (char *)w->map + 4096 + (size_t)r * region;
        braid_dev_region_init_host(&L, w->regions[r]);
    }
    *w_p = w;
    return BRAID_SUCCESS;
}

void braid_twin_world_destroy(braid_twin_world_t *w)
{
    if (!w) return;
    munmap(w->map, w->map_bytes);
    free(w->ctr);
    free(w);
}

/* Every FIFO's control block, for f(ctl). */
static void each_ctl(const braid_twin_world_t *w, void (*f)(braid_dev_fifo_ctl_t *, void *),
                     void *arg)
{
    const braid_dev_layout_t *L = &w->L;
    for (int r = 0; r < L->nranks; r++)
        for (int b = 0; b < L->nblk; b++) {
            for (int c = 0; c < L->nch; c++)
                f((braid_dev_fifo_ctl_t *)(void *)(w->regions[r] +
                                                   braid_dev_layout_ring_off(L, c, b)),
                  arg);
            for (int s = 0; L->p2p_fifo_bytes && s < L->nranks; s++)
                f((braid_dev_fifo_ctl_t *)(void *)(w->regions[r] +
                                                   braid_dev_layout_p2p_off(L, s, b)),
                  arg);
        }
}

static void set_abort(braid_dev_fifo_ctl_t *ctl, void *arg)
{
    (void)arg;
    __atomic_store_n(&ctl->abort, 1, __ATOMIC_RELEASE);
}

void braid_twin_world_abort(braid_twin_world_t *w)
{
    each_ctl(w, set_abort, NULL);
}

void braid_twin_rank_abort(braid_twin_world_t *w, int rank)
{
    __atomic_store_n(&w->aborts[rank], 1, __ATOMIC_RELEASE);
}

static void max_inflight(braid_dev_fifo_ctl_t *ctl, void *arg)
{
    uint64_t *m = arg, v = __atomic_load_n(&ctl->max_inflight, __ATOMIC_ACQUIRE);
    if (v > *m) *m = v;
}

uint64_t braid_twin_max_inflight(const braid_twin_world_t *w)
{
    uint64_t m = 0;
    each_ctl(w, max_inflight, &m);
    return m;
}

struct braid_twin_rank {
    braid_twin_world_t *w;
    int rank;
    braid_dev_image_t img;
    braid_dev_report_t reports[BRAID_DEV_MAX_LANES];
    braid_dev_drive_t drive;
    char what[64];
    void *scratch;
    void *pre; /* a pre-scaled avg's input (reduce.h), where it is not the receive buffer */
    int saved;
    /* threaded launches: one persistent thread per lane, two barriers per launch */
    int threads;
    pthread_barrier_t go, end;
    pthread_t t[BRAID_DEV_MAX_LANES];
    uint64_t budget;
    int quit;
};

braid_result_t braid_twin_rank_prepare(braid_twin_world_t *w, int rank, const braid_twin_args_t *a,
                                       braid_twin_rank_t **r_p)
{
    braid_twin_rank_t *r = calloc(1, sizeof(*r));
    if (!r) return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory");
    r->w = w;
    r->rank = rank;
    braid_dev_call_t call = {.coll = a->coll,
                             .algo = a->algo,
                             .dtype = a->dtype,
                             .op = a->op,
                             .root = a->root,
                             .count = a->count,
                             .sendbuf = a->sendbuf,
                             .recvbuf = a->recvbuf,
                             .seq = a->seq,
                             .order = a->order};
    /* A pre-scaled avg (float16, bfloat16): the input times 1/nranks first (the GPU executor
     * runs its kernel of it). */
    int into_recv;
    size_t n_pre = braid_dev_call_avg_prescale(&call, w->L.nranks, rank, &into_recv);
    if (n_pre) {
        void *dst = into_recv ? a->recvbuf : (r->pre = malloc(n_pre * braid_dtype_size(a->dtype)));
        if (!dst) {
            free(r);
            return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory for the scaled input");
        }
        size_t es = braid_dtype_size(a->dtype);
        twin_aligned(dst, es, n_pre, "avg pre-scaling output"); /* reduce.cu's kernel */
        twin_aligned(a->sendbuf, es, n_pre, "avg pre-scaling input");
        braid_reduce_avg_prescale(a->dtype, dst, a->sendbuf, n_pre, w->L.nranks);
        call.sendbuf = dst;
    }
    if (braid_dev_call_needs_scratch(&call, w->L.nranks, rank)) {
        r->scratch = malloc(a->count * braid_dtype_size(a->dtype));
        if (!r->scratch) {
            free(r->pre);
            free(r);
            return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory for scratch");
        }
        call.scratch = r->scratch;
    }
    braid_result_t res = braid_dev_image_build(&w->L, rank, &call, w->regions, &w->ctr[rank],
                                               &w->aborts[rank], r->reports, &r->img);
    if (res < 0) {
        free(r->scratch);
        free(r->pre);
        free(r);
        return res;
    }
    /* The twin runs the image where it is (the GPU executor relocates it to a device copy). */
    braid_dev_image_relocate(&r->img, (uintptr_t)r->img.host);
    braid_dev_reports_reset(r->reports, r->img.nlanes);
    snprintf(r->what, sizeof(r->what), "twin %s #%u", braid_coll_name(a->coll), a->seq);
    r->drive = (braid_dev_drive_t){.rank = rank,
                                   .nranks = w->L.nranks,
                                   .nblk = w->L.nblk,
                                   .order = a->order,
                                   .what = r->what,
                                   .nlanes = r->img.nlanes,
                                   .seq = a->seq,
                                   .reports = r->reports};
    braid_dev_drive_begin(&r->drive);
    *r_p = r;
    return BRAID_SUCCESS;
}

void braid_twin_rank_set_timeout(braid_twin_rank_t *r, double timeout_s)
{
    r->drive.timeout_s = timeout_s;
}

/* A serial launch: every unfinished lane once, one after another. */
static braid_result_t launch_serial(void *ctx, uint64_t budget)
{
    braid_twin_rank_t *r = ctx;
    braid_dev_chan_t *ch = braid_dev_image_chans(&r->img);
    for (int l = 0; l < r->img.nlanes; l++)
        if (ch[l].status != BRAID_DEV_DONE) (void)braid_dev_chan_run(&ch[l], budget);
    return BRAID_SUCCESS;
}

static void save(braid_twin_rank_t *r)
{
    if (r->saved) return;
    braid_dev_image_save(&r->img, braid_dev_image_chans(&r->img), &r->w->ctr[r->rank]);
    r->saved = 1;
}

int braid_twin_rank_poll(braid_twin_rank_t *r, uint64_t budget)
{
    static const braid_dev_drive_ops_t ops = {.launch = launch_serial};
    r->drive.budget = budget;
    int st = braid_dev_drive_step(&r->drive, &ops, r);
    if (st == 1) save(r);
    return st;
}

typedef struct {
    braid_twin_rank_t *r;
    int l;
} lane_arg_t;

/* One "thread block": runs its lane once per launch. */
static void *lane_main(void *p)
{
    lane_arg_t *a = p;
    braid_twin_rank_t *r = a->r;
    braid_dev_chan_t *ch = &braid_dev_image_chans(&r->img)[a->l];
    for (;;) {
        pthread_barrier_wait(&r->go);
        if (__atomic_load_n(&r->quit, __ATOMIC_ACQUIRE)) break;
        if (ch->status != BRAID_DEV_DONE) (void)braid_dev_chan_run(ch, r->budget);
        pthread_barrier_wait(&r->end);
    }
    return NULL;
}

static braid_result_t launch_threads(void *ctx, uint64_t budget)
{
    braid_twin_rank_t *r = ctx;
    r->budget = budget;
    pthread_barrier_wait(&r->go);
    pthread_barrier_wait(&r->end);
    return BRAID_SUCCESS;
}

static void idle_yield(void *ctx, unsigned idle)
{
    (void)ctx;
    if (idle < 64) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

braid_result_t braid_twin_rank_run_threads(braid_twin_rank_t *r, uint64_t budget, double timeout_s)
{
    int n = r->img.nlanes;
    lane_arg_t args[BRAID_DEV_MAX_LANES];
    pthread_barrier_init(&r->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&r->end, NULL, (unsigned)n + 1);
    int started = 0;
    braid_result_t res = BRAID_SUCCESS;
    for (int l = 0; l < n; l++) {
        args[l] = (lane_arg_t){.r = r, .l = l};
        if (pthread_create(&r->t[l], NULL, lane_main, &args[l]) != 0) {
            res = braid_set_error(BRAID_ERR_SYSTEM, "twin: cannot start a lane thread");
            break;
        }
        started++;
    }
    if (res == BRAID_SUCCESS) {
        static const braid_dev_drive_ops_t ops = {.launch = launch_threads, .idle = idle_yield};
        r->drive.budget = budget;
        r->drive.timeout_s = timeout_s;
        res = braid_dev_drive(&r->drive, &ops, r);
        if (res == BRAID_SUCCESS) save(r);
    }
    if (started == n) {
        __atomic_store_n(&r->quit, 1, __ATOMIC_RELEASE);
        pthread_barrier_wait(&r->go);
    } else {
        /* a thread failed to start: the barriers can never fill; the lanes that did start
         * wait in `go` forever, so detach them (the process is a test that fails now) */
        for (int l = 0; l < started; l++)
            pthread_detach(r->t[l]);
        return res;
    }
    for (int l = 0; l < started; l++)
        pthread_join(r->t[l], NULL);
    pthread_barrier_destroy(&r->go);
    pthread_barrier_destroy(&r->end);
    return res;
}

uint64_t braid_twin_rank_waits(const braid_twin_rank_t *r)
{
    uint64_t n = 0;
    for (int l = 0; l < r->img.nlanes; l++)
        n += r->reports[l].waits;
    return n;
}

void braid_twin_rank_free(braid_twin_rank_t *r)
{
    if (!r) return;
    braid_dev_image_free(&r->img);
    free(r->scratch);
    free(r->pre);
    free(r);
}
