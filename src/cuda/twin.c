/* The CPU twin of the device engine: engine_dev.h compiled by the C compiler, its data
 * movement done by the CPU kernels of src/reduce (the same element functions as the CUDA
 * kernels), run with threads as thread blocks over FIFOs in one shared mapping. See twin.h.
 *
 * FIFO layout: ring FIFO (c, p) carries channel c's messages into ring position p (from
 * position p - 1); point-to-point FIFO (s, r) carries rank s's messages to rank r. */
#include "cuda/twin.h"
#include "core/comm.h"
#define BRAID_DEV_ENGINE_IMPL 1
#include "cuda/engine_dev.h"
#include "core/log.h"
#include "reduce/reduce.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static inline void bde_copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

static inline void bde_reduce(const braid_dev_chan_t *ch, void *dst, const void *x, const void *y,
                              size_t count, int final)
{
    if (final)
        braid_reduce_pair_final(ch->dtype, ch->op, dst, x, y, count, ch->nranks);
    else
        braid_reduce_pair(ch->dtype, ch->op, dst, x, y, count);
}

static inline void bde_finalize(const braid_dev_chan_t *ch, void *dst, const void *src,
                                size_t count)
{
    braid_reduce_finalize(ch->dtype, ch->op, dst, src, count, ch->nranks);
}

braid_result_t braid_dev_plan_expand(const braid_plan_params_t *p, int channel,
                                     braid_dev_step_t **steps_p, uint32_t *nsteps_p)
{
    braid_plan_cursor_t c;
    braid_step_t s;
    size_t n = 0, cap = 0;
    braid_dev_step_t *v = NULL;
    braid_plan_begin(&c, p, channel);
    while (!c.done && braid_plan_next(&c, &s)) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            braid_dev_step_t *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                free(v);
                return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %zu plan steps", cap);
            }
            v = nv;
        }
        if (s.send_peer >= p->nranks || s.recv_peer >= p->nranks || s.send_peer < -1 ||
            s.recv_peer < -1 || p->nranks + 1 > BRAID_DEV_MAX_LINKS) {
            free(v);
            return braid_set_error(BRAID_ERR_INTERNAL, "plan step names peer %d/%d of %d ranks",
                                   s.send_peer, s.recv_peer, p->nranks);
        }
        v[n++] = (braid_dev_step_t){
            .prim = s.prim,
            .flags = s.flags,
            .send_link = (uint8_t)(s.send_peer == BRAID_PEER_RING ? 0 : 1 + s.send_peer),
            .recv_link = (uint8_t)(s.recv_peer == BRAID_PEER_RING ? 0 : 1 + s.recv_peer),
            .in_off = s.in_off,
            .out_off = s.out_off,
            .count = s.count,
        };
    }
    *steps_p = v;
    *nsteps_p = (uint32_t)n;
    return BRAID_SUCCESS;
}

struct braid_twin_world {
    int nranks, nchannels, nslots;
    size_t slot_bytes;
    void *map;
    size_t map_bytes;
    braid_dev_fifo_t *fifos; /* in the mapping too (same address in every forked rank) */
    int nfifos;
};

static braid_dev_fifo_t *ring_fifo(braid_twin_world_t *w, int c, int pos)
{
    return &w->fifos[c * w->nranks + pos];
}

static braid_dev_fifo_t *p2p_fifo(braid_twin_world_t *w, int s, int r)
{
    return &w->fifos[w->nchannels * w->nranks + s * w->nranks + r];
}

braid_result_t braid_twin_world_create(int nranks, int nchannels, int nslots, size_t slot_bytes,
                                       braid_twin_world_t **w_p)
{
    if (nranks < 1 || nranks > BRAID_DEV_MAX_LINKS - 1 || nchannels < 1 ||
        nchannels > BRAID_MAX_CHANNELS || nslots < 1 || nslots > 64 || slot_bytes < 16)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "twin: bad world (%d ranks, %d channels, %d slots of %zu B)", nranks,
                               nchannels, nslots, slot_bytes);
    braid_twin_world_t *w = calloc(1, sizeof(*w));
    if (!w) return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory");
    w->nranks = nranks;
    w->nchannels = nchannels;
    w->nslots = nslots;
    w->slot_bytes = (slot_bytes + 15) & ~(size_t)15;
    w->nfifos = nchannels * nranks + nranks * nranks;
    size_t per = sizeof(braid_dev_fifo_ctl_t) + (size_t)nslots * w->slot_bytes;
    size_t head = ((size_t)w->nfifos * sizeof(braid_dev_fifo_t) + 63) & ~(size_t)63;
    w->map_bytes = head + (size_t)w->nfifos * per;
    w->map = mmap(NULL, w->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w->map == MAP_FAILED) {
        size_t bytes = w->map_bytes;
        free(w);
        return braid_set_error(BRAID_ERR_SYSTEM, "twin: mmap of %zu bytes: %m", bytes);
    }
    w->fifos = w->map;
    char *p = (char *)w->map + head;
    for (int i = 0; i < w->nfifos; i++) {
        braid_dev_fifo_t *f = &w->fifos[i];
        f->ctl = (braid_dev_fifo_ctl_t *)p;
        f->slots = p + sizeof(braid_dev_fifo_ctl_t);
        f->slot_bytes = w->slot_bytes;
        f->nslots = (uint32_t)nslots;
        p += per;
    }
    *w_p = w;
    return BRAID_SUCCESS;
}

void braid_twin_world_destroy(braid_twin_world_t *w)
{
    if (!w) return;
    munmap(w->map, w->map_bytes);
    free(w);
}

void braid_twin_world_abort(braid_twin_world_t *w)
{
    for (int i = 0; i < w->nfifos; i++)
        __atomic_store_n(&w->fifos[i].ctl->abort, 1, __ATOMIC_RELEASE);
}

uint64_t braid_twin_max_inflight(const braid_twin_world_t *w)
{
    uint64_t m = 0;
    for (int i = 0; i < w->nfifos; i++) {
        uint64_t v = __atomic_load_n(&w->fifos[i].ctl->max_inflight, __ATOMIC_ACQUIRE);
        if (v > m) m = v;
    }
    return m;
}

struct braid_twin_rank {
    braid_twin_world_t *w;
    int rank, nch;
    braid_dev_chan_t ch[BRAID_MAX_CHANNELS];
    braid_dev_step_t *steps[BRAID_MAX_CHANNELS];
    void *scratch;
    char err[256];
};

braid_result_t braid_twin_rank_prepare(braid_twin_world_t *w, int rank, const braid_twin_args_t *a,
                                       braid_twin_rank_t **r_p)
{
    braid_twin_rank_t *r = calloc(1, sizeof(*r));
    if (!r) return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory");
    r->w = w;
    r->rank = rank;
    int n = w->nranks, ring = a->algo == BRAID_PLAN_RING;
    int pos = rank;
    if (ring && a->order)
        for (int i = 0; i < n; i++)
            if (a->order[i] == rank) pos = i;
    size_t es = braid_dtype_size(a->dtype);
    r->nch = ring || n == 1 ? w->nchannels : 1;
    braid_plan_params_t pp = {.coll = a->coll,
                              .algo = a->algo,
                              .nranks = n,
                              .rank = ring ? pos : rank,
                              .root = a->root,
                              .order = ring ? a->order : NULL,
                              .count = a->count,
                              .chunk = w->slot_bytes / es,
                              .nchannels = r->nch};
    char *out = a->recvbuf;
    /* A tree reduce accumulates in the output, which only the root has (as engine.c). */
    if (a->algo == BRAID_PLAN_TREE && a->coll == BRAID_COLL_REDUCE && rank != a->root && n > 1 &&
        a->count) {
        r->scratch = malloc(a->count * es);
        if (!r->scratch) {
            free(r);
            return braid_set_error(BRAID_ERR_NOMEM, "twin: out of memory for scratch");
        }
        out = r->scratch;
    }
    for (int c = 0; c < r->nch; c++) {
        braid_dev_chan_t *ch = &r->ch[c];
        braid_result_t res = braid_dev_plan_expand(&pp, c, &r->steps[c], &ch->nsteps);
        if (res < 0) {
            braid_twin_rank_free(r);
            return res;
        }
        ch->steps = r->steps[c];
        ch->send[0] = ring_fifo(w, c, (pos + 1) % n);
        ch->recv[0] = ring_fifo(w, c, pos);
        for (int p = 0; c == 0 && p < n; p++) {
            ch->send[1 + p] = p2p_fifo(w, rank, p);
            ch->recv[1 + p] = p2p_fifo(w, p, rank);
        }
        /* The counters continue where this rank's last collective left them. */
        for (int l = 0; l < BRAID_DEV_MAX_LINKS; l++) {
            if (ch->send[l]) ch->posted[l] = __atomic_load_n(&ch->send[l]->ctl->head, 0);
            if (ch->recv[l]) ch->consumed[l] = __atomic_load_n(&ch->recv[l]->ctl->tail, 0);
        }
        ch->in = a->sendbuf;
        ch->out = out;
        ch->es = (uint32_t)es;
        ch->dtype = a->dtype;
        ch->op = a->op;
        ch->nranks = n;
        ch->reduces = a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
                      a->coll == BRAID_COLL_REDUCE_SCATTER;
        ch->seq = a->seq;
        ch->status = BRAID_DEV_BLOCKED;
    }
    *r_p = r;
    return BRAID_SUCCESS;
}

static braid_result_t chan_error(braid_twin_rank_t *r, int c)
{
    const braid_dev_chan_t *ch = &r->ch[c];
    if (ch->status == BRAID_DEV_ERR_MISMATCH)
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "twin: rank %d channel %d step %u: link %u delivered tag %#llx, "
                               "expected collective #%u",
                               r->rank, c, ch->pc, ch->bad_link, (unsigned long long)ch->bad_tag,
                               ch->seq);
    if (ch->status == BRAID_DEV_ERR_ABORTED)
        return braid_set_error(BRAID_ERR_ABORTED, "twin: rank %d channel %d aborted at step %u",
                               r->rank, c, ch->pc);
    return braid_set_error(BRAID_ERR_INTERNAL, "twin: rank %d channel %d step %u: bad link %u",
                           r->rank, c, ch->pc, ch->bad_link);
}

int braid_twin_rank_poll(braid_twin_rank_t *r, uint64_t budget)
{
    int done = 1;
    for (int c = 0; c < r->nch; c++) {
        braid_dev_chan_t *ch = &r->ch[c];
        if (ch->status == BRAID_DEV_DONE) continue;
        int32_t st = braid_dev_chan_run(ch, budget);
        if (st < 0) return chan_error(r, c);
        if (st != BRAID_DEV_DONE) done = 0;
    }
    return done;
}

typedef struct {
    braid_twin_rank_t *r;
    int c;
    uint64_t budget;
    double timeout_s;
    int timed_out;
} block_arg_t;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One "thread block": runs its channel, relaunching after every BLOCKED return. */
static void *block_main(void *p)
{
    block_arg_t *b = p;
    braid_dev_chan_t *ch = &b->r->ch[b->c];
    double t0 = mono_s();
    while (braid_dev_chan_run(ch, b->budget) == BRAID_DEV_BLOCKED) {
        if (mono_s() - t0 > b->timeout_s) {
            b->timed_out = 1;
            break;
        }
        sched_yield();
    }
    return NULL;
}

braid_result_t braid_twin_rank_run_threads(braid_twin_rank_t *r, uint64_t budget, double timeout_s)
{
    pthread_t t[BRAID_MAX_CHANNELS];
    block_arg_t b[BRAID_MAX_CHANNELS];
    int started = 0;
    braid_result_t res = BRAID_SUCCESS;
    for (int c = 0; c < r->nch; c++) {
        b[c] = (block_arg_t){.r = r, .c = c, .budget = budget, .timeout_s = timeout_s};
        if (pthread_create(&t[c], NULL, block_main, &b[c]) != 0) {
            res = braid_set_error(BRAID_ERR_SYSTEM, "twin: cannot start a block thread");
            braid_twin_world_abort(r->w);
            break;
        }
        started++;
    }
    for (int c = 0; c < started; c++)
        pthread_join(t[c], NULL);
    for (int c = 0; c < started && res == BRAID_SUCCESS; c++) {
        if (b[c].timed_out)
            res = braid_set_error(BRAID_ERR_TIMEOUT, "twin: rank %d channel %d stuck at step %u",
                                  r->rank, c, r->ch[c].pc);
        else if (r->ch[c].status < 0)
            res = chan_error(r, c);
    }
    return res;
}

uint64_t braid_twin_rank_waits(const braid_twin_rank_t *r)
{
    uint64_t n = 0;
    for (int c = 0; c < r->nch; c++)
        n += r->ch[c].waits;
    return n;
}

void braid_twin_rank_free(braid_twin_rank_t *r)
{
    if (!r) return;
    for (int c = 0; c < BRAID_MAX_CHANNELS; c++)
        free(r->steps[c]);
    free(r->scratch);
    free(r);
}
