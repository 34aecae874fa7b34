/* The device engine's host side shared by the GPU executor and the CPU twin: region layout,
 * plan expansion into lanes' steps, launch images. See devplan.h. */
#include "cuda/devplan.h"
#include "core/comm.h"
#include "core/log.h"
#include "reduce/reduce.h"

#include <stdlib.h>
#include <string.h>

#define CTL_BYTES ((sizeof(braid_dev_fifo_ctl_t) + 127) & ~(size_t)127)

braid_result_t braid_dev_threads_check(int64_t threads)
{
    if (threads < 32 || threads > 512 || threads % 32)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_DEV_THREADS=%lld: the engine kernel's threads per block must "
                               "be a multiple of 32 from 32 to 512",
                               (long long)threads);
    return BRAID_SUCCESS;
}

braid_result_t braid_dev_layout_init(braid_dev_layout_t *L, int nranks, int nch, int nblk,
                                     int nslots, int p2p_slots, size_t slot_bytes)
{
    if (nranks < 1 || nranks > BRAID_DEV_MAX_LINKS - 1)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "device engine: %d ranks (at most %d)",
                               nranks, BRAID_DEV_MAX_LINKS - 1);
    if (nch < 1 || nblk < 1 || nch * nblk > BRAID_DEV_MAX_LANES)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "device engine: %d channels x %d blocks (1 to %d lanes)", nch, nblk,
                               BRAID_DEV_MAX_LANES);
    if (nslots < 1 || nslots > 64 || p2p_slots < 1 || p2p_slots > 64)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "device engine: %d / %d slots per FIFO (1 to 64)", nslots,
                               p2p_slots);
    if (slot_bytes < 16 || slot_bytes % 16 || slot_bytes > ((size_t)1 << 30))
        return braid_set_error(
            BRAID_ERR_INVALID_ARG,
            "device engine: slots of %zu bytes (a multiple of 16, 16 B to 1 GiB)", slot_bytes);
    memset(L, 0, sizeof(*L));
    L->nranks = nranks;
    L->nch = nch;
    L->nblk = nblk;
    L->nslots = nslots;
    L->p2p_slots = p2p_slots;
    L->slot_bytes = slot_bytes;
    L->ring_fifo_bytes = CTL_BYTES + (size_t)nslots * slot_bytes;
    L->p2p_fifo_bytes = nranks > 1 ? CTL_BYTES + (size_t)p2p_slots * slot_bytes : 0;
    L->region_bytes =
        (size_t)nch * nblk * L->ring_fifo_bytes + (size_t)nranks * nblk * L->p2p_fifo_bytes;
    return BRAID_SUCCESS;
}

size_t braid_dev_layout_ring_off(const braid_dev_layout_t *L, int c, int b)
{
    return ((size_t)c * L->nblk + (size_t)b) * L->ring_fifo_bytes;
}

size_t braid_dev_layout_p2p_off(const braid_dev_layout_t *L, int from, int b)
{
    return (size_t)L->nch * L->nblk * L->ring_fifo_bytes +
           ((size_t)from * L->nblk + (size_t)b) * L->p2p_fifo_bytes;
}

void braid_dev_region_init_host(const braid_dev_layout_t *L, void *region)
{
    char *r = region;
    for (int c = 0; c < L->nch; c++)
        for (int b = 0; b < L->nblk; b++)
            memset(r + braid_dev_layout_ring_off(L, c, b), 0, CTL_BYTES);
    for (int s = 0; L->p2p_fifo_bytes && s < L->nranks; s++)
        for (int b = 0; b < L->nblk; b++)
            memset(r + braid_dev_layout_p2p_off(L, s, b), 0, CTL_BYTES);
}

/* Part `part` of nparts of count es-byte elements: [*start_p, *start_p + *len_p), cut at
 * multiples of 16 bytes from the step's start. */
static void split(size_t count, size_t es, int part, int nparts, size_t *start_p, size_t *len_p)
{
    size_t v = es >= 16 ? 1 : 16 / es;
    size_t units = (count + v - 1) / v;
    size_t a = units * (size_t)part / (size_t)nparts * v;
    size_t b = units * (size_t)(part + 1) / (size_t)nparts * v;
    if (a > count) a = count;
    if (b > count) b = count;
    *start_p = a;
    *len_p = b - a;
}

braid_result_t braid_dev_plan_expand(const braid_plan_params_t *p, int channel, int part,
                                     int nparts, size_t es, braid_dev_step_t **steps_p,
                                     uint32_t *nsteps_p)
{
    braid_plan_cursor_t c;
    braid_step_t s;
    size_t n = 0, cap = 0;
    braid_dev_step_t *v = NULL;
    if (p->nranks + 1 > BRAID_DEV_MAX_LINKS || part < 0 || part >= nparts || es == 0)
        return braid_set_error(BRAID_ERR_INTERNAL, "device plan: %d ranks, part %d of %d",
                               p->nranks, part, nparts);
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
            s.recv_peer < -1) {
            free(v);
            return braid_set_error(BRAID_ERR_INTERNAL, "plan step names peer %d/%d of %d ranks",
                                   s.send_peer, s.recv_peer, p->nranks);
        }
        size_t start, len;
        split(s.count, es, part, nparts, &start, &len);
        v[n++] = (braid_dev_step_t){
            .prim = s.prim,
            .flags = s.flags,
            .send_link = (uint8_t)(s.send_peer == BRAID_PEER_RING ? 0 : 1 + s.send_peer),
            .recv_link = (uint8_t)(s.recv_peer == BRAID_PEER_RING ? 0 : 1 + s.recv_peer),
            .in_off = s.in_off + start,
            .out_off = s.out_off + start,
            .count = len,
        };
    }
    *steps_p = v;
    *nsteps_p = (uint32_t)n;
    return BRAID_SUCCESS;
}

int braid_dev_call_needs_scratch(const braid_dev_call_t *a, int nranks, int rank)
{
    return a->algo == BRAID_PLAN_TREE && a->coll == BRAID_COLL_REDUCE && rank != a->root &&
           nranks > 1 && a->count;
}

size_t braid_dev_call_avg_prescale(braid_dev_call_t *call, int nranks, int rank, int *into_recv_p)
{
    int reduces = call->coll == BRAID_COLL_ALLREDUCE || call->coll == BRAID_COLL_REDUCE ||
                  call->coll == BRAID_COLL_REDUCE_SCATTER;
    *into_recv_p = 0;
    if (!reduces || call->op != BRAID_AVG || !braid_reduce_avg_prescales(call->dtype) ||
        !call->count)
        return 0;
    call->op = BRAID_SUM;
    *into_recv_p = call->coll == BRAID_COLL_ALLREDUCE ||
                   (call->coll == BRAID_COLL_REDUCE && rank == call->root);
    return call->coll == BRAID_COLL_REDUCE_SCATTER ? call->count * (size_t)nranks : call->count;
}

static int ring_pos(const int *order, int n, int rank)
{
    if (order)
        for (int i = 0; i < n; i++)
            if (order[i] == rank) return i;
    return rank;
}

int braid_dev_link_peer(int link, int is_send, int nranks, int rank, const int *order)
{
    if (link > 0) return link - 1;
    int pos = ring_pos(order, nranks, rank);
    int q = is_send ? (pos + 1) % nranks : (pos + nranks - 1) % nranks;
    return order ? order[q] : q;
}

static braid_dev_fifo_t fifo_at(char *region, size_t off, size_t slot_bytes, int nslots, int peer)
{
    return (braid_dev_fifo_t){.ctl = (braid_dev_fifo_ctl_t *)(void *)(region + off),
                              .slots = region + off + CTL_BYTES,
                              .slot_bytes = slot_bytes,
                              .nslots = (uint32_t)nslots,
                              .peer = (uint32_t)peer};
}

braid_result_t braid_dev_image_build(const braid_dev_layout_t *L, int rank,
                                     const braid_dev_call_t *a, char *const *regions,
                                     const braid_dev_counters_t *ctr, const uint64_t *abort,
                                     braid_dev_report_t *reports, braid_dev_image_t *img)
{
    memset(img, 0, sizeof(*img));
    const int n = L->nranks, ring = a->algo == BRAID_PLAN_RING || n == 1;
    const size_t es = braid_dtype_size(a->dtype);
    if (!es || rank < 0 || rank >= n)
        return braid_set_error(BRAID_ERR_INTERNAL, "device image: dtype %d, rank %d of %d",
                               (int)a->dtype, rank, n);
    const int pos = ring_pos(a->order, n, rank);
    const int nch = ring ? L->nch : 1, nlanes = nch * L->nblk;
    braid_plan_params_t pp = {.coll = a->coll,
                              .algo = a->algo,
                              .nranks = n,
                              .rank = ring ? pos : rank,
                              .root = a->root,
                              .order = ring ? a->order : NULL,
                              .count = a->count,
                              .chunk = L->slot_bytes * (size_t)L->nblk / es,
                              .nchannels = nch};
    braid_dev_step_t *steps[BRAID_DEV_MAX_LANES] = {0};
    uint32_t nsteps[BRAID_DEV_MAX_LANES] = {0};
    size_t total_steps = 0;
    braid_result_t res = BRAID_SUCCESS;
    for (int l = 0; l < nlanes && res == BRAID_SUCCESS; l++) {
        res = braid_dev_plan_expand(&pp, l / L->nblk, l % L->nblk, L->nblk, es, &steps[l],
                                    &nsteps[l]);
        total_steps += nsteps[l];
    }
    /* FIFO descriptors per lane: the ring (send, recv), and with a latency plan (send, recv)
     * per rank on channel 0's lanes. */
    const int links = ring ? 1 : 1 + n;
    const size_t chans_bytes = (size_t)nlanes * sizeof(braid_dev_chan_t);
    const size_t fifos_bytes = (size_t)nlanes * 2 * links * sizeof(braid_dev_fifo_t);
    const size_t steps_at = (chans_bytes + fifos_bytes + 15) & ~(size_t)15;
    const size_t bytes = steps_at + total_steps * sizeof(braid_dev_step_t);
    char *buf = res == BRAID_SUCCESS ? calloc(1, bytes) : NULL;
    if (res == BRAID_SUCCESS && !buf)
        res = braid_set_error(BRAID_ERR_NOMEM, "device image: out of memory (%zu bytes)", bytes);
    if (res < 0) {
        for (int l = 0; l < nlanes; l++)
            free(steps[l]);
        return res;
    }
    braid_dev_chan_t *chans = (braid_dev_chan_t *)(void *)buf;
    braid_dev_fifo_t *fifos = (braid_dev_fifo_t *)(void *)(buf + chans_bytes);
    size_t step_off = steps_at;
    const int next = a->order ? a->order[(pos + 1) % n] : (pos + 1) % n;
    const int reduces = a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
                        a->coll == BRAID_COLL_REDUCE_SCATTER;
    for (int l = 0; l < nlanes; l++) {
        const int c = l / L->nblk, b = l % L->nblk;
        braid_dev_chan_t *ch = &chans[l];
        braid_dev_fifo_t *f = &fifos[(size_t)l * 2 * links];
        /* Offsets relative to the image (base 0): braid_dev_image_relocate makes them pointers. */
        if (nsteps[l]) {
            memcpy(buf + step_off, steps[l], nsteps[l] * sizeof(braid_dev_step_t));
            ch->steps = (const braid_dev_step_t *)(uintptr_t)step_off;
            step_off += nsteps[l] * sizeof(braid_dev_step_t);
        }
        ch->nsteps = nsteps[l];
        f[0] = fifo_at(regions[next], braid_dev_layout_ring_off(L, c, b), L->slot_bytes, L->nslots,
                       next);
        f[1] = fifo_at(regions[rank], braid_dev_layout_ring_off(L, c, b), L->slot_bytes, L->nslots,
                       braid_dev_link_peer(0, 0, n, rank, a->order));
        ch->send[0] = (braid_dev_fifo_t *)(uintptr_t)((char *)&f[0] - buf);
        ch->recv[0] = (braid_dev_fifo_t *)(uintptr_t)((char *)&f[1] - buf);
        for (int p = 0; !ring && c == 0 && p < n; p++) {
            braid_dev_fifo_t *g = &f[2 + 2 * p];
            g[0] = fifo_at(regions[p], braid_dev_layout_p2p_off(L, rank, b), L->slot_bytes,
                           L->p2p_slots, p);
            g[1] = fifo_at(regions[rank], braid_dev_layout_p2p_off(L, p, b), L->slot_bytes,
                           L->p2p_slots, p);
            ch->send[1 + p] = (braid_dev_fifo_t *)(uintptr_t)((char *)&g[0] - buf);
            ch->recv[1 + p] = (braid_dev_fifo_t *)(uintptr_t)((char *)&g[1] - buf);
        }
        for (int k = 0; k < links; k++) {
            ch->posted[k] = ctr->posted[l][k];
            ch->consumed[k] = ctr->consumed[l][k];
        }
        ch->in = a->sendbuf;
        ch->out = braid_dev_call_needs_scratch(a, n, rank) ? a->scratch : a->recvbuf;
        ch->es = (uint32_t)es;
        ch->dtype = a->dtype;
        ch->op = a->op;
        ch->nranks = n;
        ch->reduces = reduces;
        ch->seq = a->seq;
        ch->status = BRAID_DEV_BLOCKED;
        ch->abort = abort;
        ch->report = reports ? &reports[l] : NULL;
        free(steps[l]);
    }
    img->host = buf;
    img->bytes = bytes;
    img->nlanes = nlanes;
    img->base = 0;
    return BRAID_SUCCESS;
}

#define RELOC(p, d) ((p) ? (void *)((uintptr_t)(p) + (d)) : (void *)0)

void braid_dev_image_relocate(braid_dev_image_t *img, uintptr_t base)
{
    uintptr_t d = base - img->base;
    braid_dev_chan_t *chans = braid_dev_image_chans(img);
    for (int l = 0; l < img->nlanes; l++) {
        braid_dev_chan_t *ch = &chans[l];
        ch->steps = RELOC(ch->steps, d);
        for (int k = 0; k < BRAID_DEV_MAX_LINKS; k++) {
            ch->send[k] = RELOC(ch->send[k], d);
            ch->recv[k] = RELOC(ch->recv[k], d);
        }
    }
    img->base = base;
}

void braid_dev_image_save(const braid_dev_image_t *img, const braid_dev_chan_t *chans,
                          braid_dev_counters_t *ctr)
{
    const braid_dev_chan_t *mine = braid_dev_image_chans(img);
    for (int l = 0; l < img->nlanes; l++)
        for (int k = 0; k < BRAID_DEV_MAX_LINKS; k++) {
            if (mine[l].send[k]) ctr->posted[l][k] = chans[l].posted[k];
            if (mine[l].recv[k]) ctr->consumed[l][k] = chans[l].consumed[k];
        }
}

void braid_dev_image_free(braid_dev_image_t *img)
{
    free(img->host);
    memset(img, 0, sizeof(*img));
}

void braid_dev_reports_reset(braid_dev_report_t *r, int n)
{
    memset(r, 0, (size_t)n * sizeof(*r));
    for (int l = 0; l < n; l++)
        r[l].status = BRAID_DEV_BLOCKED;
}
