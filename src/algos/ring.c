/* Ring and chain plans.
 *
 * Definitions (as in NCCL and Gloo):
 *   channel  an independent ring over a contiguous 1/nchannels slice of the data.
 *   loop     one pass of the ring over up to nranks*chunk elements of the channel's slice;
 *            loop l covers [g, g + nranks*c) with c = min(chunk, ceil((slice - g)/nranks)).
 *   block b  the b-th of the nranks pieces of a loop: [g + b*c, g + (b+1)*c) clipped to the
 *            slice (it may be empty near the end; empty messages still flow).
 *   step k   one primitive on one block.
 *
 * All-reduce, rank r of n (n >= 2), per loop; after the reduce-scatter half rank r holds the
 * fully reduced block r, then the all-gather half circulates it:
 *   k = 0              SEND                  block (r-1) mod n
 *   k = 1 .. n-2       RECV_REDUCE_SEND      block (r-1-k) mod n
 *   k = n-1            RECV_REDUCE_COPY_SEND block r
 *   k = n .. 2n-3      RECV_COPY_SEND        block (r-(k-n+1)) mod n
 *   k = 2n-2           RECV                  block (r+1) mod n
 * Block b is reduced along one chain, starting at rank b+1 and ending at rank b, always as
 * "received op local", so every rank ends with bit-identical values.
 *
 * Reduce-scatter (count = recvcount C per rank): the first n steps of the above, with block b
 * being rank b's output [b*C, (b+1)*C) and a loop being one chunk of every block; the last step
 * is RECV_REDUCE_COPY into the output. All-gather: COPY_SEND block r, then RECV_COPY_SEND
 * blocks (r-k) mod n for k = 1..n-2, then RECV block (r+1) mod n.
 *
 * Broadcast is a pipelined chain root -> root+1 -> ... -> root-1 (position p = r - root):
 * p = 0 COPY_SEND, 0 < p < n-1 RECV_COPY_SEND, p = n-1 RECV, chunk by chunk.
 * Reduce is a chain root+1 -> ... -> root (p = r - root - 1): p = 0 SEND, then
 * RECV_REDUCE_SEND, and RECV_REDUCE_COPY at the root.
 * With one rank every collective is one COPY per chunk.
 *
 * r, b and the chain positions above are ring positions. The ring visits ranks in the order
 * order[0..n-1] (topology-aware: each host boundary crossed once), so reduce-scatter and
 * all-gather block b is rank order[b]'s slice, and a chain starts at the root's position. */
#include "algos/plan.h"
#include "core/comm.h"

#include <string.h>

static const char *prim_names[BRAID_PRIM_COUNT] = {
    [BRAID_PRIM_SEND] = "send",
    [BRAID_PRIM_RECV] = "recv",
    [BRAID_PRIM_COPY] = "copy",
    [BRAID_PRIM_COPY_SEND] = "copySend",
    [BRAID_PRIM_RECV_REDUCE_SEND] = "recvReduceSend",
    [BRAID_PRIM_RECV_REDUCE_COPY] = "recvReduceCopy",
    [BRAID_PRIM_RECV_REDUCE_COPY_SEND] = "recvReduceCopySend",
    [BRAID_PRIM_RECV_COPY_SEND] = "recvCopySend",
};

const char *braid_prim_name(braid_prim_t p)
{
    return (unsigned)p < BRAID_PRIM_COUNT ? prim_names[p] : "invalid";
}

int braid_prim_recvs(braid_prim_t p)
{
    return p == BRAID_PRIM_RECV || p >= BRAID_PRIM_RECV_REDUCE_SEND;
}

int braid_prim_sends(braid_prim_t p)
{
    return p == BRAID_PRIM_SEND || p == BRAID_PRIM_COPY_SEND || p == BRAID_PRIM_RECV_REDUCE_SEND ||
           p == BRAID_PRIM_RECV_REDUCE_COPY_SEND || p == BRAID_PRIM_RECV_COPY_SEND;
}

int braid_prim_reads_in(braid_prim_t p)
{
    return p == BRAID_PRIM_SEND || p == BRAID_PRIM_COPY || p == BRAID_PRIM_COPY_SEND ||
           p == BRAID_PRIM_RECV_REDUCE_SEND || p == BRAID_PRIM_RECV_REDUCE_COPY ||
           p == BRAID_PRIM_RECV_REDUCE_COPY_SEND;
}

int braid_prim_writes_out(braid_prim_t p)
{
    return p == BRAID_PRIM_RECV || p == BRAID_PRIM_COPY || p == BRAID_PRIM_COPY_SEND ||
           p == BRAID_PRIM_RECV_REDUCE_COPY || p == BRAID_PRIM_RECV_REDUCE_COPY_SEND ||
           p == BRAID_PRIM_RECV_COPY_SEND;
}

/* The rank at ring position pos, and the ring position of rank r. */
static int rank_at(const braid_plan_params_t *p, int pos)
{
    return p->order ? p->order[pos] : pos;
}

static int pos_of(const braid_plan_params_t *p, int r)
{
    if (!p->order) return r;
    for (int q = 0; q < p->nranks; q++)
        if (p->order[q] == r) return q;
    return r;
}

static int mod(long a, int n)
{
    long m = a % n;
    return (int)(m < 0 ? m + n : m);
}

/* Steps in one loop for this rank. */
static int steps_per_loop(const braid_plan_cursor_t *c)
{
    const braid_plan_params_t *p = &c->p;
    int n = p->nranks;
    if (n == 1) return 1;
    if (p->algo != BRAID_PLAN_RING) return c->nsteps;
    switch (p->coll) {
    case BRAID_COLL_ALLREDUCE:
    case BRAID_COLL_BARRIER:
        return 2 * n - 1;
    case BRAID_COLL_REDUCE_SCATTER:
    case BRAID_COLL_ALLGATHER:
        return n;
    default:
        return 1; /* broadcast, reduce: one step per chunk */
    }
}

static void start_loop(braid_plan_cursor_t *c)
{
    const braid_plan_params_t *p = &c->p;
    size_t rem = c->ch_count - c->loop_off;
    if ((p->coll == BRAID_COLL_ALLREDUCE || p->coll == BRAID_COLL_BARRIER) && p->nranks > 1 &&
        p->algo == BRAID_PLAN_RING) {
        size_t per = (rem + (size_t)p->nranks - 1) / (size_t)p->nranks;
        c->loop_chunk = per < p->chunk ? per : p->chunk;
    } else {
        c->loop_chunk = rem < p->chunk ? rem : p->chunk;
    }
    c->k = 0;
}

void braid_plan_begin(braid_plan_cursor_t *c, const braid_plan_params_t *p, int channel)
{
    memset(c, 0, sizeof(*c));
    c->p = *p;
    if (c->p.chunk == 0) c->p.chunk = 1;
    if (c->p.nchannels < 1) c->p.nchannels = 1;
    c->channel = channel;
    size_t nch = (size_t)c->p.nchannels;
    c->ch_off = p->count * (size_t)channel / nch;
    c->ch_count = braid_plan_channel_count(p->count, c->p.nchannels, channel);
    if (c->p.algo != BRAID_PLAN_RING && c->p.nranks > 1) {
        /* One channel: the latency algorithms' messages are few and small. */
        c->ch_off = 0;
        c->ch_count = channel == 0 ? p->count : 0;
        if (c->p.algo == BRAID_PLAN_TREE)
            braid_tree_begin(c);
        else
            braid_recdbl_begin(c);
    }
    c->done = c->ch_count == 0;
    if (!c->done) start_loop(c);
}

/* Allreduce block b of the current loop, as [off, off+len) within the channel slice. */
static void ar_block(const braid_plan_cursor_t *c, int b, size_t *off_p, size_t *len_p)
{
    size_t start = c->loop_off + (size_t)b * c->loop_chunk;
    size_t len = 0;
    if (start < c->ch_count) {
        len = c->ch_count - start;
        if (len > c->loop_chunk) len = c->loop_chunk;
    } else {
        start = c->ch_count;
    }
    *off_p = c->ch_off + start;
    *len_p = len;
}

static void step_allreduce(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int n = c->p.nranks, r = c->p.rank, k = c->k, b;
    if (k == 0) {
        s->prim = BRAID_PRIM_SEND;
        b = mod(r - 1, n);
    } else if (k <= n - 2) {
        s->prim = BRAID_PRIM_RECV_REDUCE_SEND;
        b = mod(r - 1 - k, n);
    } else if (k == n - 1) {
        s->prim = BRAID_PRIM_RECV_REDUCE_COPY_SEND;
        b = r;
    } else if (k <= 2 * n - 3) {
        s->prim = BRAID_PRIM_RECV_COPY_SEND;
        b = mod(r - (k - n + 1), n);
    } else {
        s->prim = BRAID_PRIM_RECV;
        b = mod(r + 1, n);
    }
    size_t off, len;
    ar_block(c, b, &off, &len);
    s->in_off = s->out_off = off;
    s->count = len;
}

static void step_reduce_scatter(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int n = c->p.nranks, r = c->p.rank, k = c->k, b;
    size_t w = c->ch_off + c->loop_off;
    if (k == 0) {
        s->prim = BRAID_PRIM_SEND;
        b = mod(r - 1, n);
    } else if (k <= n - 2) {
        s->prim = BRAID_PRIM_RECV_REDUCE_SEND;
        b = mod(r - 1 - k, n);
    } else {
        s->prim = BRAID_PRIM_RECV_REDUCE_COPY;
        b = r;
    }
    s->in_off = (size_t)rank_at(&c->p, b) * c->p.count + w;
    s->out_off = w;
    s->count = c->loop_chunk;
}

static void step_allgather(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int n = c->p.nranks, r = c->p.rank, k = c->k, b;
    size_t w = c->ch_off + c->loop_off;
    if (k == 0) {
        s->prim = BRAID_PRIM_COPY_SEND;
        b = r;
    } else if (k <= n - 2) {
        s->prim = BRAID_PRIM_RECV_COPY_SEND;
        b = mod(r - k, n);
    } else {
        s->prim = BRAID_PRIM_RECV;
        b = mod(r + 1, n);
    }
    s->in_off = w;
    s->out_off = (size_t)rank_at(&c->p, b) * c->p.count + w;
    s->count = c->loop_chunk;
}

static void step_chain(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int n = c->p.nranks;
    size_t w = c->ch_off + c->loop_off;
    if (c->p.coll == BRAID_COLL_BROADCAST) {
        int pos = mod(c->p.rank - pos_of(&c->p, c->p.root), n);
        s->prim = pos == 0      ? BRAID_PRIM_COPY_SEND
                  : pos < n - 1 ? BRAID_PRIM_RECV_COPY_SEND
                                : BRAID_PRIM_RECV;
    } else {
        int pos = mod(c->p.rank - pos_of(&c->p, c->p.root) - 1, n);
        s->prim = pos == 0      ? BRAID_PRIM_SEND
                  : pos < n - 1 ? BRAID_PRIM_RECV_REDUCE_SEND
                                : BRAID_PRIM_RECV_REDUCE_COPY;
    }
    s->in_off = s->out_off = w;
    s->count = c->loop_chunk;
}

int braid_plan_next(braid_plan_cursor_t *c, braid_step_t *s)
{
    if (c->done) return 0;
    const braid_plan_params_t *p = &c->p;
    s->flags = 0;
    s->send_peer = s->recv_peer = BRAID_PEER_RING;
    if (p->nranks == 1) {
        s->prim = BRAID_PRIM_COPY;
        s->in_off = s->out_off = c->ch_off + c->loop_off;
        s->count = c->loop_chunk;
    } else if (p->algo == BRAID_PLAN_RECDBL) {
        braid_recdbl_step(c, s);
    } else if (p->algo == BRAID_PLAN_TREE) {
        braid_tree_step(c, s);
    } else {
        switch (p->coll) {
        case BRAID_COLL_ALLREDUCE:
        case BRAID_COLL_BARRIER:
            step_allreduce(c, s);
            break;
        case BRAID_COLL_REDUCE_SCATTER:
            step_reduce_scatter(c, s);
            break;
        case BRAID_COLL_ALLGATHER:
            step_allgather(c, s);
            break;
        default:
            step_chain(c, s);
            break;
        }
    }
    if (++c->k == steps_per_loop(c)) {
        int ar = (p->coll == BRAID_COLL_ALLREDUCE || p->coll == BRAID_COLL_BARRIER) &&
                 p->algo == BRAID_PLAN_RING;
        c->loop_off += ar && p->nranks > 1 ? c->loop_chunk * (size_t)p->nranks : c->loop_chunk;
        if (c->loop_off >= c->ch_count)
            c->done = 1;
        else
            start_loop(c);
    }
    return 1;
}
