/* Direct (single-copy) shared-memory collectives for a communicator on one host, on the
 * segments of transport/shm_direct.h: every rank reads its peers' data in place.
 *
 * Terms: a block is at most `block` bytes of the call's buffer (the slot size, cache-sized),
 * blocks run one after the other and are numbered g over the communicator's life (the same on
 * every rank); block g uses slot g % 2 of every rank's segment. A block's slice of rank r is
 * braid_direct_slice(len, n, r): elements [r*q, (r+1)*q) with q = ceil(len / n) rounded up to
 * a cache line of elements (the last slices may be short or empty).
 *
 * All-reduce, large (more than braid_direct_small_max bytes), per block g of len elements at
 * element offset off:
 *   1. copy in: this rank copies in[off, off+len) into its slot, publishes tag 2g+1;
 *   2. reduce-scatter: waits for every peer's 2g+1, then reduces its slice from the n slots in
 *      rank order 0, 1, ..., n-1 (((x0 op x1) op x2) ...: one fixed order per element, and each
 *      element reduced by one rank only, so every rank ends with the same bits), into out and
 *      back into its own slot (over its own input slice, which only it reads), publishes 2g+2;
 *   3. all-gather: for each peer j (from this rank + 1 on, so the peers spread their reads),
 *      waits for j's 2g+2 and copies j's slice from j's slot into out.
 *   Two synchronisations per block whatever n. Reuse: slot g % 2 is rewritten for block g+2,
 *   after this rank's step 3 of block g+1 saw every peer's 2(g+1)+2, which each peer publishes
 *   after its own step 3 of block g: nobody reads the slot any more.
 * All-reduce, small (one block of at most braid_direct_small_max bytes, block g): copy in,
 * publish 2g+1 (the payload sits in the tag's cache line up to BRAID_DIRECT_INLINE bytes), wait
 * for every peer's 2g+1, reduce all n inputs in rank order into out. One synchronisation; the
 * slot is rewritten for block g+2 after every peer published g+1, which it does after reading
 * block g.
 *
 * Checks: every slot's line carries the call's descriptor; a peer whose descriptor differs is
 * BRAID_ERR_MISMATCH naming both calls. A wait spins (BRAID_SPIN_US), yields (BRAID_YIELD_US),
 * then sleeps on the tag (futex), checking the peer (failure notice, closed, dead), the abort
 * flag, the timeout and, from 1 ms on, messages of peers that run this call with another
 * algorithm (braid_engine_check_foreign). */
#include "algos/direct.h"
#include "core/engine.h"
#include "core/log.h"
#include "reduce/reduce.h"
#include "transport/shm_direct.h"

#include <sched.h>
#include <string.h>

/* Bytes reduced per pass over the n inputs (the accumulator stays in L1). */
#define SUB_BYTES BRAID_DIRECT_SCRATCH

void braid_direct_slice(size_t len, int n, int r, size_t es, size_t *off_p, size_t *cnt_p)
{
    size_t line = es < 64 ? 64 / es : 1;
    size_t q = (len + (size_t)n - 1) / (size_t)n;
    q = (q + line - 1) / line * line;
    size_t lo = q * (size_t)r, hi = lo + q;
    if (lo > len) lo = len;
    if (hi > len) hi = len;
    *off_p = lo;
    *cnt_p = hi - lo;
}

size_t braid_direct_small_max(size_t block, int n)
{
    (void)n;
    size_t m = BRAID_DIRECT_SMALL_MAX;
    return m < block ? m : block;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct {
    struct braid_comm *comm;
    braid_direct_t *d;
    const braid_op_args_t *a;
    braid_msg_hdr_t desc;
    uint64_t spin_ns, yield_ns, timeout_ns;
} dctx_t;

static braid_result_t check_desc(dctx_t *x, int r, const braid_direct_line_t *l)
{
    const braid_msg_hdr_t *e = &x->desc;
    if (l->seq == e->seq && l->coll == e->coll && l->dtype == e->dtype && l->op == e->op &&
        l->root == e->root && l->count == e->count)
        return BRAID_SUCCESS;
    braid_msg_hdr_t h = {.seq = l->seq,
                         .coll = l->coll,
                         .dtype = l->dtype,
                         .op = l->op,
                         .root = l->root,
                         .count = l->count};
    char theirs[160], mine[160];
    braid_engine_describe(theirs, sizeof(theirs), &h);
    braid_engine_describe(mine, sizeof(mine), e);
    return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d called %s", r, theirs,
                           x->comm->rank, mine);
}

/* Waits until rank r's slot s reached tag want, then checks its descriptor. */
static braid_result_t wait_tag(dctx_t *x, int r, int s, uint32_t want, int check);

static braid_result_t wait_peer(dctx_t *x, int r, int s, uint32_t want)
{
    return wait_tag(x, r, s, want, 1);
}

static braid_result_t wait_tag(dctx_t *x, int r, int s, uint32_t want, int check)
{
    braid_direct_line_t *l = braid_direct_line(x->d, r, s);
    if (!braid_direct_ready(l, want)) {
        struct braid_comm *comm = x->comm;
        uint64_t start = braid_now_ns(), gap = 1000000ull, next_foreign = start + gap;
        for (;;) {
            int got = 0;
            for (int i = 0; i < 64 && !(got = braid_direct_ready(l, want)); i++)
                cpu_relax();
            if (got) break;
            if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
                return braid_set_error(BRAID_ERR_ABORTED, "%s #%u aborted: %s",
                                       braid_coll_name(x->a->coll), x->desc.seq,
                                       braid_comm_abort_reason(comm));
            uint64_t now = braid_now_ns(), idle = now - start;
            if (idle < x->spin_ns) continue;
            BRAID_CHECK(braid_direct_check_peer(x->d, r, 0));
            if (idle < x->spin_ns + x->yield_ns) {
                sched_yield();
                continue;
            }
            if (idle > x->timeout_ns)
                return braid_set_error(
                    BRAID_ERR_TIMEOUT,
                    "%s #%u timed out after %.1f s waiting for rank %d (direct shared memory); "
                    "rank %d may be hung or late",
                    braid_coll_name(x->a->coll), x->desc.seq, comm->timeout_s, r, r);
            if (now >= next_foreign) {
                BRAID_CHECK(braid_engine_check_foreign(comm, x->a, x->desc.seq));
                gap = gap < 64000000ull ? gap * 2 : gap;
                next_foreign = now + gap;
            }
            uint64_t deadline = start + x->timeout_ns;
            if (deadline > next_foreign) deadline = next_foreign;
            braid_direct_sleep(x->d, r, s, want, deadline);
        }
    }
    return check ? check_desc(x, r, l) : BRAID_SUCCESS;
}

static void put_desc(braid_direct_line_t *l, const braid_msg_hdr_t *h)
{
    l->seq = h->seq;
    l->coll = h->coll;
    l->dtype = h->dtype;
    l->op = h->op;
    l->root = h->root;
    l->count = h->count;
}

/* out[0, cnt) = the reduction in rank order of the n slots' elements [e, e + cnt) (slot s,
 * blocks of `bytes` bytes), in passes of SUB_BYTES; each pass also copied to copy + e (when
 * not NULL) while it is in L1. out NULL: the passes go through the scratch buffer (copy only). */
static void reduce_all(dctx_t *x, char *out, int s, size_t bytes, size_t e, size_t cnt, char *copy)
{
    braid_direct_t *d = x->d;
    int n = x->comm->nranks;
    braid_datatype_t dt = x->a->dtype;
    braid_redop_t op = x->a->op;
    size_t es = braid_dtype_size(dt), sub = SUB_BYTES / es;
    for (size_t o = 0; o < cnt; o += sub) {
        size_t m = cnt - o < sub ? cnt - o : sub, at = (e + o) * es;
        char *acc = out ? out + o * es : braid_direct_scratch(d);
        const char *p0 = braid_direct_data(d, 0, s, bytes) + at;
        const char *p1 = braid_direct_data(d, 1, s, bytes) + at;
        if (n == 2) {
            braid_reduce_pair_final(dt, op, acc, p0, p1, m, n);
        } else {
            braid_reduce_pair(dt, op, acc, p0, p1, m);
            for (int j = 2; j < n - 1; j++)
                braid_reduce_pair(dt, op, acc, acc, braid_direct_data(d, j, s, bytes) + at, m);
            braid_reduce_pair_final(dt, op, acc, acc, braid_direct_data(d, n - 1, s, bytes) + at, m,
                                    n);
        }
        if (copy) memcpy(copy + at, acc, m * es);
    }
}

static void ctx_init(dctx_t *x, struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    x->comm = c;
    x->d = c->direct;
    x->a = a;
    x->desc = braid_engine_desc(a, seq);
    x->spin_ns = (uint64_t)c->spin_us * 1000ull;
    x->yield_ns = (uint64_t)c->yield_us * 1000ull;
    x->timeout_ns = (uint64_t)(c->timeout_s * 1e9);
}

/* The rule for writing this rank's slot (line or data) for block g: every peer published
 * block g - 1 (2(g-1)+1 on slot (g-1) % 2), which each does only after it finished reading
 * block g - 2, the slot's previous block. The collectives whose every block waits for every
 * peer keep it true by themselves (synced); after a broadcast or reduce, where a rank may have
 * waited for the root only, the first write waits for it here. */
static braid_result_t begin_block(dctx_t *x, uint64_t g)
{
    braid_direct_t *d = x->d;
    uint64_t *synced = braid_direct_synced(d); /* blocks below it: every peer published */
    if (g == 0 || *synced >= g) return BRAID_SUCCESS;
    int n = x->comm->nranks, me = x->comm->rank;
    uint32_t t = (uint32_t)(2 * (g - 1) + 1);
    for (int k = 1; k < n; k++)
        BRAID_CHECK(wait_tag(x, (me + k) % n, (int)((g - 1) & 1), t, 0));
    *synced = g;
    return BRAID_SUCCESS;
}

/* Copies bytes of src into this rank's slot for block g with the descriptor and publishes
 * tag (src NULL: the descriptor only). */
static braid_result_t copy_in(dctx_t *x, uint64_t g, const char *src, size_t bytes, uint32_t tag)
{
    braid_direct_t *d = x->d;
    int me = x->comm->rank, s = (int)(g & 1);
    BRAID_CHECK(begin_block(x, g));
    put_desc(braid_direct_line(d, me, s), &x->desc);
    if (src) memcpy(braid_direct_data(d, me, s, bytes), src, bytes);
    braid_direct_publish(d, s, tag);
    return BRAID_SUCCESS;
}

/* Waits for every peer's tag on block g's slot (then every peer published block g). */
static braid_result_t wait_all(dctx_t *x, uint64_t g, uint32_t tag)
{
    int n = x->comm->nranks, me = x->comm->rank;
    for (int k = 1; k < n; k++)
        BRAID_CHECK(wait_peer(x, (me + k) % n, (int)(g & 1), tag));
    uint64_t *synced = braid_direct_synced(x->d);
    if (*synced < g + 1) *synced = g + 1;
    return BRAID_SUCCESS;
}

braid_result_t braid_direct_allreduce(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    braid_direct_t *d = x.d;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), bytes = a->count * es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    size_t block = braid_direct_block(d);
    if (bytes <= braid_direct_small_max(block, n)) {
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(copy_in(&x, *g, in, bytes, t));
        BRAID_CHECK(wait_all(&x, *g, t));
        reduce_all(&x, out, s, bytes, 0, a->count, NULL);
        ++*g;
        return BRAID_SUCCESS;
    }
    size_t blk = block / es;
    for (size_t off = 0; off < a->count; off += blk, ++*g) {
        size_t len = a->count - off < blk ? a->count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t1 = (uint32_t)(2 * *g + 1), t2 = t1 + 1;
        BRAID_CHECK(copy_in(&x, *g, in + off * es, lb, t1));
        BRAID_CHECK(wait_all(&x, *g, t1));
        size_t so, sl;
        braid_direct_slice(len, n, me, es, &so, &sl);
        char *mine = braid_direct_data(d, me, s, lb);
        reduce_all(&x, out + (off + so) * es, s, lb, so, sl, mine);
        braid_direct_publish(d, s, t2);
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(&x, j, s, t2));
            size_t jo, jl;
            braid_direct_slice(len, n, j, es, &jo, &jl);
            memcpy(out + (off + jo) * es, braid_direct_data(d, j, s, lb) + jo * es, jl * es);
        }
    }
    return BRAID_SUCCESS;
}

/* Reduce-scatter (count = elements per rank), per block g of len elements at offset off of
 * every rank's part: copy in the n parts' [off, off+len) one after the other (part i at i*len),
 * publish 2g+1, wait for every peer's, reduce part `me` of the n slots in rank order into
 * out[off, off+len). One synchronisation per block (the slot's reuse as the small all-reduce's). */
braid_result_t braid_direct_reduce_scatter(struct braid_comm *c, const braid_op_args_t *a,
                                           uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    braid_direct_t *d = x.d;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), count = a->count;
    size_t blk = braid_direct_block(d) / ((size_t)n * es);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es, tb = lb * (size_t)n;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(begin_block(&x, *g));
        put_desc(braid_direct_line(d, me, s), &x.desc);
        char *mine = braid_direct_data(d, me, s, tb);
        for (int i = 0; i < n; i++)
            memcpy(mine + (size_t)i * lb, in + ((size_t)i * count + off) * es, lb);
        braid_direct_publish(d, s, t);
        BRAID_CHECK(wait_all(&x, *g, t));
        reduce_all(&x, out + off * es, s, tb, (size_t)me * len, len, NULL);
    }
    return BRAID_SUCCESS;
}

/* All-gather (count = elements per rank), per block g of len elements at offset off: copy in
 * in[off, off+len), publish 2g+1, then for each peer j wait for its 2g+1 and copy its slot to
 * out[j*count + off]. One synchronisation per block. */
braid_result_t braid_direct_allgather(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    braid_direct_t *d = x.d;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), count = a->count, blk = braid_direct_block(d) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(copy_in(&x, *g, in + off * es, lb, t));
        char *own = out + ((size_t)me * count + off) * es;
        if (own != in + off * es) memcpy(own, in + off * es, lb);
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(&x, j, s, t));
            memcpy(out + ((size_t)j * count + off) * es, braid_direct_data(d, j, s, lb), lb);
        }
        uint64_t *synced = braid_direct_synced(d);
        if (*synced < *g + 1) *synced = *g + 1;
    }
    return BRAID_SUCCESS;
}

/* Broadcast, per block g: the root copies in (after every peer published block g - 1: the
 * write rule) and publishes 2g+1; every other rank waits for the root's 2g+1, copies the
 * slot to out and publishes its own 2g+1 (a tag for the root's next write). */
braid_result_t braid_direct_broadcast(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    braid_direct_t *d = x.d;
    int me = c->rank, root = a->root;
    size_t es = braid_dtype_size(a->dtype), count = a->count, blk = braid_direct_block(d) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        if (me == root) {
            BRAID_CHECK(copy_in(&x, *g, in + off * es, lb, t));
            if (out && out != in) memcpy(out + off * es, in + off * es, lb);
            continue;
        }
        BRAID_CHECK(wait_peer(&x, root, s, t));
        memcpy(out + off * es, braid_direct_data(d, root, s, lb), lb);
        BRAID_CHECK(copy_in(&x, *g, NULL, 0, t));
    }
    return BRAID_SUCCESS;
}

/* Reduce, per block g as the large all-reduce's steps 1-2 (every rank reduces its slice; the
 * root into out, the others through the scratch buffer into their slot, then 2g+2), then the
 * root copies the other ranks' slices once each published 2g+2; the others go on. The root
 * publishes its next block only after that copy, so the slots' reuse holds as for all-reduce. */
braid_result_t braid_direct_reduce(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    braid_direct_t *d = x.d;
    int n = c->nranks, me = c->rank, root = a->root;
    size_t es = braid_dtype_size(a->dtype), count = a->count, blk = braid_direct_block(d) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t1 = (uint32_t)(2 * *g + 1), t2 = t1 + 1;
        BRAID_CHECK(copy_in(&x, *g, in + off * es, lb, t1));
        BRAID_CHECK(wait_all(&x, *g, t1));
        size_t so, sl;
        braid_direct_slice(len, n, me, es, &so, &sl);
        char *mine = braid_direct_data(d, me, s, lb);
        if (me != root) {
            reduce_all(&x, NULL, s, lb, so, sl, mine);
            braid_direct_publish(d, s, t2);
            continue;
        }
        reduce_all(&x, out + (off + so) * es, s, lb, so, sl, NULL);
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(&x, j, s, t2));
            size_t jo, jl;
            braid_direct_slice(len, n, j, es, &jo, &jl);
            memcpy(out + (off + jo) * es, braid_direct_data(d, j, s, lb) + jo * es, jl * es);
        }
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_direct_run(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    switch (a->coll) {
    case BRAID_COLL_ALLREDUCE:
        return braid_direct_allreduce(c, a, seq);
    case BRAID_COLL_REDUCE_SCATTER:
        return braid_direct_reduce_scatter(c, a, seq);
    case BRAID_COLL_ALLGATHER:
        return braid_direct_allgather(c, a, seq);
    case BRAID_COLL_BROADCAST:
        return braid_direct_broadcast(c, a, seq);
    case BRAID_COLL_REDUCE:
        return braid_direct_reduce(c, a, seq);
    default:
        return braid_set_error(BRAID_ERR_INTERNAL, "direct: %s is not a direct collective",
                               braid_coll_name(a->coll));
    }
}
