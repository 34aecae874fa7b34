/* Direct (single-copy) shared-memory collectives for a communicator on one host, on the
 * segments of transport/shm_direct.h: every rank reads its peers' data in place.
 *
 * Terms: a block is at most `block` bytes of the call's buffer (the slot size, cache-sized),
 * blocks run one after the other and are numbered g over the communicator's life (the same on
 * every rank); block g uses slot g % 2 of every rank's segment. A block's slice of rank r is
 * braid_direct_slice(len, n, r): elements [r*q, (r+1)*q) with q = ceil(len / n) rounded up to
 * a cache line of elements (the last slices may be short or empty).
 *
 * All-reduce, large (more than braid_direct_small_max bytes: 16 KiB / n), per block g of len
 * elements at element offset off:
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
 *   Staging (BRAID_DIRECT_PIPELINE): step 1 of block g+1 runs between steps 2 and 3 of block g,
 *   so the copy-in overlaps the peers' reductions. It rewrites slot (g+1) % 2 while a peer may
 *   still be in step 3 of block g-1, which reads only this rank's slice of that slot; the
 *   copy-in skips this rank's slice of block g+1, the same bytes when blocks g-1 and g+1 have
 *   the same length. So it is done early only then, or when block g-1 belongs to an earlier
 *   call (every peer finished it before publishing 2g+1); a short last block is staged after
 *   step 3 as before.
 *   Mapped outputs: a rank whose out lies in a region of braid_mem_alloc says so with 2g+1
 *   (BRAID_DIRECT_OUT_MAPPED, the reference in its control page); in step 2 every peer writes
 *   its reduced slice straight into that out (the slot copy is made only for peers whose out is
 *   not mapped), and in step 3 the rank only waits for the peers' 2g+2. Safe: rank j writes
 *   only slice j of a peer's out, which no other rank reads or writes in the call (in place,
 *   slice j of every input is read by rank j alone, before it writes it), and only after that
 *   peer published 2g+1, so inside the call; the peer returns after every 2g+2 of its last
 *   block. With mapped inputs too, a rank moves 2 bytes per byte (reads its slice of the n
 *   inputs, writes it into the n outputs) instead of 3.
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
 * algorithm (braid_engine_check_foreign).
 *
 * Failure with buffers in place: a rank whose call published a block by reference posts its
 * failure and returns only once no peer is still in the call (braid_direct_drain); a peer
 * checks the owner's failure before each mapping of its buffers (so one that entered late
 * never uses them). A caller may reuse its buffers after an error as after success. */
#include "algos/direct.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/timeline.h"
#include "core/yield.h"
#include "core/copy.h"
#include "core/mem.h"
#include "reduce/reduce.h"
#include "transport/shm_direct.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

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
    size_t m = BRAID_DIRECT_SMALL_BYTES / (size_t)(n > 1 ? n : 1);
    return m < block ? m : block;
}

typedef struct {
    struct braid_comm *comm;
    braid_direct_t *d;
    const braid_op_args_t *a;
    braid_msg_hdr_t desc;
    uint64_t spin_ns, yield_ns, timeout_ns;
    uint64_t tl0;           /* BRAID_TRACE: when the open block began, 0 = none */
    size_t tl_bytes;        /* its bytes (this rank's input to it) */
    int nt;                 /* the output copies use non-temporal stores (BRAID_NT_MIN) */
    braid_direct_pick_t pk; /* pk.nt: the copies into the slots do (BRAID_DIRECT_NT_SLOTS) */
    /* The large all-reduce's output (a->recvbuf) when it lies in a region of braid_mem_alloc
     * (out_mapped): published with every block (BRAID_DIRECT_OUT_MAPPED), for the peers to
     * write into. */
    int out_mapped;
    braid_mem_ref_t out_rb;
    int exposed; /* a block was published by reference: peers may use this rank's buffers */
} dctx_t;

/* A copy of a reduced slice: block-relative base, and whether it takes streaming stores. */
typedef struct {
    char *p;
    int nt;
} dst_t;

/* A copy into the call's output. */
static void out_copy(const dctx_t *x, char *dst, const char *src, size_t n)
{
    if (x->nt)
        braid_copy_nt(dst, src, n);
    else
        braid_copy(dst, src, n);
}

/* BRAID_TRACE: a block runs from its begin_block to the next one's (or the call's end). */
static void timeline_block(dctx_t *x, size_t next_bytes)
{
    uint64_t now = 0;
    if (x->tl0) {
        now = braid_now_ns();
        braid_tl_event_t ev = {.name = "directBlock",
                               .kind = BRAID_TL_STEP,
                               .t0 = x->tl0,
                               .t1 = now,
                               .seq = x->desc.seq,
                               .bytes = x->tl_bytes,
                               .dtype = -1,
                               .op = -1,
                               .algo = -1,
                               .root = -1,
                               .send_peer = -1,
                               .recv_peer = -1};
        braid_timeline_add(x->comm, &ev);
    }
    x->tl0 =
        next_bytes != (size_t)-1 && braid_timeline_enabled() ? (now ? now : braid_now_ns()) : 0;
    x->tl_bytes = next_bytes;
}

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
    /* A first spin without the clock: a small call's peer is usually a few hundred ns away,
     * and reading the clock first was 6% of an 8 B all-reduce. */
    for (int i = 0; i < 32 && !braid_direct_ready(l, want); i++)
        braid_cpu_relax();
    if (!braid_direct_ready(l, want)) {
        struct braid_comm *comm = x->comm;
        uint64_t start = braid_now_ns(), gap = 1000000ull, next_foreign = start + gap;
        for (;;) {
            int got = 0;
            for (int i = 0; i < 64 && !(got = braid_direct_ready(l, want)); i++)
                braid_cpu_relax();
            if (got) break;
            if (atomic_load_explicit(&comm->aborted, memory_order_relaxed))
                return braid_set_error(BRAID_ERR_ABORTED, "%s #%u aborted: %s",
                                       braid_coll_name(x->a->coll), x->desc.seq,
                                       braid_comm_abort_reason(comm));
            uint64_t now = braid_now_ns(), idle = now - start;
            if (idle < x->spin_ns) continue;
            braid_result_t pr = braid_direct_check_peer(x->d, r, 0);
            /* A peer that published the tag and then finished (or destroyed its communicator)
             * between the look above and the check: the tag counts (published before). */
            if (pr != BRAID_SUCCESS) {
                if (braid_direct_ready(l, want)) break;
                return pr;
            }
            if (idle < x->spin_ns + x->yield_ns && braid_wait_yield(comm->yield_slow_ns, now))
                continue;
            if (idle > x->timeout_ns)
                return braid_set_error(
                    BRAID_ERR_TIMEOUT,
                    "%s #%u timed out after %.1f s waiting for rank %d (direct shared memory); "
                    "rank %d may be hung or late",
                    braid_coll_name(x->a->coll), x->desc.seq, comm->timeout_s, r, r);
            if (now >= next_foreign) {
                BRAID_CHECK(braid_engine_check_foreign(comm, x->a, x->desc.seq));
                BRAID_CHECK(braid_comm_watch(comm, idle)); /* hier: the parent's call */
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

/* Writes the descriptor into this rank's line unless it is there already: a block staged early
 * (the large all-reduce) rewrites a line whose previous block of the same call a peer may still
 * be checking, and equal fields are left alone rather than rewritten under it. */
static void put_desc(braid_direct_line_t *l, const braid_msg_hdr_t *h)
{
    if (l->seq == h->seq && l->coll == h->coll && l->dtype == h->dtype && l->op == h->op &&
        l->root == h->root && l->count == h->count)
        return;
    l->seq = h->seq;
    l->coll = h->coll;
    l->dtype = h->dtype;
    l->op = h->op;
    l->root = h->root;
    l->count = h->count;
}

/* out[0, cnt) = the reduction in rank order of src[0..n)[e, e + cnt) (each rank's block: its
 * slot's data or its mapped buffer), in passes of SUB_BYTES; each pass also copied to
 * copy[i].p + e (i < ncopy) while it is in L1. out NULL, or out the very memory of an input (an
 * in-place call on a mapped buffer): the passes go through the scratch buffer, then to out and
 * the copies. */
static void reduce_all(dctx_t *x, const char *const *src, size_t e, size_t cnt, char *out,
                       const dst_t *copy, int ncopy)
{
    braid_direct_t *d = x->d;
    int n = x->comm->nranks, me = x->comm->rank;
    braid_datatype_t dt = x->a->dtype;
    braid_redop_t op = x->a->op;
    size_t es = braid_dtype_size(dt), sub = SUB_BYTES / es;
    int scratch = !out || out == src[me] + e * es;
    for (size_t o = 0; o < cnt; o += sub) {
        size_t m = cnt - o < sub ? cnt - o : sub, at = (e + o) * es;
        char *acc = scratch ? braid_direct_scratch(d) : out + o * es;
        /* In rank order, up to 8 sources per call (the kernels take 4 per pass). */
        for (int j = 0; j < n;) {
            const void *in[8];
            int k = 0;
            if (j > 0) in[k++] = acc;
            while (k < 8 && j < n)
                in[k++] = src[j++] + at;
            braid_reduce_many(dt, op, acc, in, k, m, j == n ? n : 0);
        }
        if (scratch && out) braid_copy(out + o * es, acc, m * es);
        for (int i = 0; i < ncopy; i++)
            braid_copy_shared(copy[i].p + at, acc, m * es, copy[i].nt);
    }
}

/* The sources of block g (slot s, `bytes` bytes of payload): every rank's slot data, or, for
 * a rank whose line says its buffer is mapped (braid_mem_alloc), that buffer in place (mine:
 * this rank's own pointer; rest: the bytes the call reads from a mapped buffer's block on). */
static braid_result_t sources(dctx_t *x, int s, size_t bytes, size_t rest, const char *mine_in,
                              const char **src)
{
    braid_direct_t *d = x->d;
    int n = x->comm->nranks, me = x->comm->rank;
    for (int j = 0; j < n; j++) {
        braid_direct_line_t *l = braid_direct_line(d, j, s);
        if (!(l->flags & BRAID_DIRECT_MAPPED))
            src[j] = braid_direct_data(d, j, s, bytes);
        else if (j == me)
            src[j] = mine_in;
        else
            BRAID_CHECK(braid_direct_peer_buffer(d, j, l, rest, &src[j]));
    }
    return BRAID_SUCCESS;
}

static void ctx_init(dctx_t *x, struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    memset(x, 0, sizeof(*x));
    x->comm = c;
    x->d = c->direct;
    x->a = a;
    x->desc = braid_engine_desc(a, seq);
    x->spin_ns = (uint64_t)c->spin_us * 1000ull;
    x->yield_ns = (uint64_t)c->yield_us * 1000ull;
    x->timeout_ns = braid_timeout_ns(c->timeout_s);
    /* The bytes the call writes into its output (reduce-scatter's go through the reduction) */
    size_t es = braid_dtype_size(a->dtype), out_bytes = a->count * es;
    if (a->coll == BRAID_COLL_ALLGATHER) out_bytes *= (size_t)c->nranks;
    if (a->coll == BRAID_COLL_REDUCE_SCATTER) out_bytes = 0;
    x->nt = c->direct_nt_min && out_bytes >= c->direct_nt_min;
    braid_direct_pick_init(&x->pk, c, a);
}

/* The rule for writing this rank's slot (line or data) for block g: every peer published
 * block g - 1 (2(g-1)+1 on slot (g-1) % 2), which each does only after it finished reading
 * block g - 2, the slot's previous block. The collectives whose every block waits for every
 * peer keep it true by themselves (synced); after a broadcast or reduce, where a rank may have
 * waited for the root only, the first write waits for it here. */
static braid_result_t begin_block(dctx_t *x, uint64_t g, size_t bytes)
{
    if (x->tl0 || braid_timeline_enabled()) timeline_block(x, bytes);
    braid_direct_pick_block(&x->pk, x->comm, bytes);
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

/* Publishes block g with the descriptor and tag: the payload (bytes at src) copied into this
 * rank's slot, or, when ref is not NULL (src lies in a region of braid_mem_alloc), only where
 * it is, for the peers to read in place (src NULL and no ref: the descriptor only). The bytes
 * [skip, skip + skip_len) of a payload beyond the line are not copied (this rank's own slice of
 * an all-reduce: the peers never read it from the slot, this rank reduces it from src). */
static braid_result_t copy_in_skip(dctx_t *x, uint64_t g, const char *src, size_t bytes,
                                   size_t skip, size_t skip_len, uint32_t tag,
                                   const braid_mem_ref_t *ref)
{
    braid_direct_t *d = x->d;
    int me = x->comm->rank, s = (int)(g & 1);
    BRAID_CHECK(begin_block(x, g, bytes));
    braid_direct_line_t *l = braid_direct_line(d, me, s);
    put_desc(l, &x->desc);
    if (bytes <= BRAID_DIRECT_INLINE) ref = NULL; /* the line's data holds payload, not refs */
    uint8_t flags = ref ? BRAID_DIRECT_MAPPED : 0;
    if (x->out_mapped) {
        flags |= BRAID_DIRECT_OUT_MAPPED;
        braid_direct_put_out_ref(
            d, s, x->out_rb.fd, x->out_rb.id, x->out_rb.bytes,
            x->out_rb.off + (uint64_t)((const char *)x->a->recvbuf - (const char *)x->out_rb.ptr));
    }
    if (l->flags != flags) l->flags = flags;
    x->exposed |= flags != 0;
    if (ref)
        braid_direct_put_ref(l, ref->fd, ref->id, ref->bytes,
                             ref->off + (uint64_t)(src - (const char *)ref->ptr));
    else if (src && bytes > BRAID_DIRECT_INLINE && skip_len) {
        char *dst = braid_direct_data(d, me, s, bytes);
        int nt = x->pk.nt;
        braid_copy_shared(dst, src, skip, nt);
        braid_copy_shared(dst + skip + skip_len, src + skip + skip_len, bytes - skip - skip_len,
                          nt);
    } else if (src)
        braid_copy_shared(braid_direct_data(d, me, s, bytes), src, bytes, x->pk.nt);
    braid_direct_publish(d, s, tag);
    return BRAID_SUCCESS;
}

static braid_result_t copy_in(dctx_t *x, uint64_t g, const char *src, size_t bytes, uint32_t tag,
                              const braid_mem_ref_t *ref)
{
    return copy_in_skip(x, g, src, bytes, 0, 0, tag, ref);
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

/* The end of a call that ran blocks [g0, g) with its input read in place: waits for every
 * peer's 2g+2 of the last block (done reading). Whether any block ran is told by the counter,
 * never by the tag: 2g+2 is 0 modulo 2^32 for g = 2^31 - 1 (mod 2^31). */
static braid_result_t wait_last(dctx_t *x, uint64_t g0, uint64_t g)
{
    if (g == g0) return BRAID_SUCCESS;
    return wait_all(x, g - 1, (uint32_t)(2 * (g - 1) + 2));
}

/* A call's buffer's region: ref set and returned when [in, in + bytes) lies in a region of
 * braid_mem_alloc and every peer can open this process's descriptors (then the peers read an
 * input in place, or write an all-reduce's output), else NULL (the blocks are copied). */
static const braid_mem_ref_t *mapped_region(const braid_direct_t *d, const void *in, size_t bytes,
                                            braid_mem_ref_t *ref)
{
    return in && bytes && braid_direct_refs_ok(d) && braid_mem_find(in, bytes, ref) ? ref : NULL;
}

/* Sources of at most SRC_STACK ranks live on the stack, more in the heap. */
#define SRC_STACK 64

typedef struct {
    const char *stack[SRC_STACK];
    dst_t dstack[SRC_STACK];
    const char **src;
    dst_t *dst; /* n copies of a reduced slice */
} src_t;

static braid_result_t src_init(src_t *t, int n)
{
    t->src = n <= SRC_STACK ? t->stack : malloc((size_t)n * sizeof(char *));
    t->dst = n <= SRC_STACK ? t->dstack : malloc((size_t)n * sizeof(dst_t));
    if (t->src && t->dst) return BRAID_SUCCESS;
    if (t->src != t->stack) free(t->src);
    if (t->dst != t->dstack) free(t->dst);
    return braid_set_error(BRAID_ERR_NOMEM, "direct: out of memory for %d sources", n);
}

static void src_free(src_t *t)
{
    if (t->src != t->stack) free(t->src);
    if (t->dst != t->dstack) free(t->dst);
}

/* Step 1 of the large all-reduce and of reduce for block g of len elements at blk: copies in
 * the peers' slices of it (or publishes the mapped reference) and publishes 2g+1; *so_p, *sl_p:
 * this rank's slice, which is never copied in (it is read from blk). */
static braid_result_t stage_block(dctx_t *x, uint64_t g, const char *blk, size_t len,
                                  const braid_mem_ref_t *ref, size_t *so_p, size_t *sl_p)
{
    size_t es = braid_dtype_size(x->a->dtype);
    braid_direct_slice(len, x->comm->nranks, x->comm->rank, es, so_p, sl_p);
    return copy_in_skip(x, g, blk, len * es, *so_p * es, *sl_p * es, (uint32_t)(2 * g + 1), ref);
}

/* The wait of block g (len elements at blk, staged): every peer's 2g+1, then src = the n
 * inputs, this rank's own read from blk. */
static braid_result_t staged_sources(dctx_t *x, uint64_t g, const char *blk, size_t len,
                                     const char **src)
{
    size_t es = braid_dtype_size(x->a->dtype);
    size_t rest = x->a->count * es - (size_t)(blk - (const char *)x->a->sendbuf);
    BRAID_CHECK(wait_all(x, g, (uint32_t)(2 * g + 1)));
    BRAID_CHECK(sources(x, (int)(g & 1), len * es, rest, blk, src));
    src[x->comm->rank] = blk;
    return BRAID_SUCCESS;
}

/* The elements of the block at off of a call of count (blocks of blk), 0 past the end. */
static size_t block_len(size_t count, size_t off, size_t blk)
{
    return off >= count ? 0 : count - off < blk ? count - off : blk;
}

static braid_result_t allreduce(dctx_t *x, const braid_op_args_t *a, const char **src, dst_t *dst)
{
    braid_direct_t *d = x->d;
    struct braid_comm *c = x->comm;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), bytes = a->count * es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    size_t block = braid_direct_block(d);
    if (bytes <= braid_direct_small_max(block, n)) {
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(copy_in(x, *g, in, bytes, t, NULL));
        BRAID_CHECK(wait_all(x, *g, t));
        BRAID_CHECK(sources(x, s, bytes, bytes, in, src));
        reduce_all(x, src, 0, a->count, out, NULL, 0);
        ++*g;
        return BRAID_SUCCESS;
    }
    braid_mem_ref_t rb;
    const braid_mem_ref_t *ref = mapped_region(x->d, in, bytes, &rb);
    x->out_mapped = mapped_region(x->d, out, bytes, &x->out_rb) != NULL;
    size_t blk = block / es, count = a->count, so, sl;
    uint64_t g0 = *g;
    BRAID_CHECK(stage_block(x, *g, in, block_len(count, 0, blk), ref, &so, &sl));
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = block_len(count, off, blk), lb = len * es;
        size_t noff = off + blk, nlen = block_len(count, noff, blk);
        int s = (int)(*g & 1);
        uint32_t t2 = (uint32_t)(2 * *g + 2);
        BRAID_CHECK(staged_sources(x, *g, in + off * es, len, src));
        /* The reduced slice goes into the output of every peer whose output is mapped, and
         * into the slot's data (a mapped rank's too: its slot holds no input then) for the
         * others to gather. */
        int ndst = 0, slot = 0;
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            if (!(braid_direct_line(d, j, s)->flags & BRAID_DIRECT_OUT_MAPPED)) {
                slot = 1;
                continue;
            }
            char *po;
            BRAID_CHECK(braid_direct_peer_out(d, j, s, bytes, &po));
            dst[ndst++] = (dst_t){po + off * es, x->nt};
        }
        if (slot) dst[ndst++] = (dst_t){braid_direct_data(d, me, s, lb), x->pk.nt};
        reduce_all(x, src, so, sl, out + (off + so) * es, dst, ndst);
        braid_direct_publish(d, s, t2);
        /* The next block is staged before this one's gather when the peers still gathering
         * block g - 1 from the next block's slot read only this rank's slice of it, which the
         * staging skips: block g - 1 is in an earlier call (every peer gathered it before it
         * published 2g+1), or it has the next block's length (the same slice). */
        int early = nlen && (nlen == blk || *g - g0 < 1) && x->comm->direct_pipeline;
        size_t nso = 0, nsl = 0;
        if (early) BRAID_CHECK(stage_block(x, *g + 1, in + noff * es, nlen, ref, &nso, &nsl));
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(x, j, s, t2));
            if (x->out_mapped) continue; /* j wrote its slice into out */
            size_t jo, jl;
            braid_direct_slice(len, n, j, es, &jo, &jl);
            out_copy(x, out + (off + jo) * es, braid_direct_data(d, j, s, lb) + jo * es, jl * es);
        }
        if (nlen && !early)
            BRAID_CHECK(stage_block(x, *g + 1, in + noff * es, nlen, ref, &nso, &nsl));
        so = nso;
        sl = nsl;
    }
    /* The peers are done with this rank's buffer: each read it before its 2g+2 of the last
     * block, which this rank waited for. */
    return BRAID_SUCCESS;
}

/* Reduce-scatter (count = elements per rank), per block g of len elements at offset off of
 * every rank's part: copy in the n parts' [off, off+len) one after the other (part i at i*len;
 * a mapped input stays where it is, its parts count apart), publish 2g+1, wait for every
 * peer's, reduce part `me` of the n inputs in rank order into out[off, off+len), publish 2g+2
 * (done reading). One synchronisation per block (the slot's reuse as the small all-reduce's); a
 * rank whose input was read in place waits for every peer's last 2g+2 before it returns. */
static braid_result_t reduce_scatter(dctx_t *x, const braid_op_args_t *a, const char **src)
{
    braid_direct_t *d = x->d;
    struct braid_comm *c = x->comm;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), count = a->count;
    size_t blk = braid_direct_block(d) / ((size_t)n * es);
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    braid_mem_ref_t rb;
    const braid_mem_ref_t *ref = mapped_region(x->d, in, count * (size_t)n * es, &rb);
    uint64_t g0 = *g;
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es, tb = lb * (size_t)n;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(begin_block(x, *g, tb));
        braid_direct_line_t *l = braid_direct_line(d, me, s);
        put_desc(l, &x->desc);
        int by_ref = ref && tb > BRAID_DIRECT_INLINE;
        l->flags = by_ref ? BRAID_DIRECT_MAPPED : 0;
        x->exposed |= by_ref;
        char *mine = braid_direct_data(d, me, s, tb);
        if (by_ref)
            braid_direct_put_ref(l, ref->fd, ref->id, ref->bytes, ref->off + (uint64_t)(off * es));
        else
            for (int i = 0; i < n; i++)
                braid_copy_shared(mine + (size_t)i * lb, in + ((size_t)i * count + off) * es, lb,
                                  x->pk.nt);
        braid_direct_publish(d, s, t);
        BRAID_CHECK(wait_all(x, *g, t));
        BRAID_CHECK(sources(x, s, tb, (count * (size_t)n - off) * es, in + off * es, src));
        /* part me of rank j: at me * len in its slot, at me * count of its mapped buffer */
        for (int j = 0; j < n; j++)
            src[j] += (braid_direct_line(d, j, s)->flags & BRAID_DIRECT_MAPPED)
                          ? (size_t)me * count * es
                          : (size_t)me * lb;
        reduce_all(x, src, 0, len, out + off * es, NULL, 0);
        braid_direct_publish(d, s, t + 1);
    }
    if (ref) BRAID_CHECK(wait_last(x, g0, *g));
    return BRAID_SUCCESS;
}

/* All-gather (count = elements per rank), per block g of len elements at offset off: copy in
 * in[off, off+len) (or publish the mapped buffer), publish 2g+1, then for each peer j wait for
 * its 2g+1 and copy its block to out[j*count + off], publish 2g+2 (done reading). One
 * synchronisation per block; a rank read in place waits for every peer's last 2g+2. */
static braid_result_t allgather(dctx_t *x, const braid_op_args_t *a)
{
    braid_direct_t *d = x->d;
    struct braid_comm *c = x->comm;
    int n = c->nranks, me = c->rank;
    size_t es = braid_dtype_size(a->dtype), count = a->count,
           blk = braid_direct_copy_block(braid_direct_block(d), n) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    braid_mem_ref_t rb;
    const braid_mem_ref_t *ref = mapped_region(x->d, in, count * es, &rb);
    uint64_t g0 = *g;
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        BRAID_CHECK(copy_in(x, *g, in + off * es, lb, t, ref));
        char *own = out + ((size_t)me * count + off) * es;
        if (own != in + off * es) out_copy(x, own, in + off * es, lb);
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(x, j, s, t));
            braid_direct_line_t *l = braid_direct_line(d, j, s);
            const char *p = braid_direct_data(d, j, s, lb);
            if (l->flags & BRAID_DIRECT_MAPPED)
                BRAID_CHECK(braid_direct_peer_buffer(d, j, l, (count - off) * es, &p));
            out_copy(x, out + ((size_t)j * count + off) * es, p, lb);
        }
        uint64_t *synced = braid_direct_synced(d);
        if (*synced < *g + 1) *synced = *g + 1;
        braid_direct_publish(d, s, t + 1);
    }
    if (ref) BRAID_CHECK(wait_last(x, g0, *g));
    return BRAID_SUCCESS;
}

/* Broadcast, per block g: the root publishes its block (copied in after every peer published
 * block g - 1, the write rule; or mapped) with 2g+1; every other rank waits for the root's 2g+1,
 * copies the block to out and publishes its own 2g+1 (a tag for the root's next write). The root
 * waits for every peer's last 2g+1 (and checks its descriptor) before it returns. */
static braid_result_t broadcast(dctx_t *x, const braid_op_args_t *a)
{
    braid_direct_t *d = x->d;
    struct braid_comm *c = x->comm;
    int n = c->nranks, me = c->rank, root = a->root;
    size_t es = braid_dtype_size(a->dtype), count = a->count,
           blk = braid_direct_copy_block(braid_direct_block(d), n) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    braid_mem_ref_t rb;
    const braid_mem_ref_t *ref = me == root ? mapped_region(x->d, in, count * es, &rb) : NULL;
    uint64_t g0 = *g;
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = count - off < blk ? count - off : blk, lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t = (uint32_t)(2 * *g + 1);
        if (me == root) {
            BRAID_CHECK(copy_in(x, *g, in + off * es, lb, t, ref));
            if (out && out != in) out_copy(x, out + off * es, in + off * es, lb);
            continue;
        }
        BRAID_CHECK(wait_peer(x, root, s, t));
        braid_direct_line_t *l = braid_direct_line(d, root, s);
        const char *p = braid_direct_data(d, root, s, lb);
        if (l->flags & BRAID_DIRECT_MAPPED)
            BRAID_CHECK(braid_direct_peer_buffer(d, root, l, (count - off) * es, &p));
        out_copy(x, out + off * es, p, lb);
        BRAID_CHECK(copy_in(x, *g, NULL, 0, t, NULL));
    }
    /* The root returns once every rank copied the last block: then a rank that called
     * something else (another root, count) is seen in its descriptor, and a mapped buffer is
     * free again. */
    if (me == root && *g > g0) {
        uint32_t last = (uint32_t)(2 * (*g - 1) + 1);
        for (int k = 1; k < n; k++)
            BRAID_CHECK(wait_tag(x, (me + k) % n, (int)((*g - 1) & 1), last, 1));
        uint64_t *synced = braid_direct_synced(d);
        if (*synced < *g) *synced = *g;
    }
    (void)ref;
    return BRAID_SUCCESS;
}

/* Reduce, per block g as the large all-reduce's steps 1-2 (every rank reduces its slice; the
 * root into out, the others through the scratch buffer into their slot; then 2g+2), then the
 * root copies the other ranks' slices once each published 2g+2; the others go on. The root
 * publishes its next block only after that copy, so the slots' reuse holds as for all-reduce;
 * a rank read in place waits for every peer's last 2g+2 before it returns. */
static braid_result_t reduce(dctx_t *x, const braid_op_args_t *a, const char **src)
{
    braid_direct_t *d = x->d;
    struct braid_comm *c = x->comm;
    int n = c->nranks, me = c->rank, root = a->root;
    size_t es = braid_dtype_size(a->dtype), count = a->count, blk = braid_direct_block(d) / es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    uint64_t *g = braid_direct_counter(d);
    braid_mem_ref_t rb;
    const braid_mem_ref_t *ref = mapped_region(x->d, in, count * es, &rb);
    uint64_t g0 = *g;
    for (size_t off = 0; off < count; off += blk, ++*g) {
        size_t len = block_len(count, off, blk), lb = len * es;
        int s = (int)(*g & 1);
        uint32_t t2 = (uint32_t)(2 * *g + 2);
        size_t so, sl;
        BRAID_CHECK(stage_block(x, *g, in + off * es, len, ref, &so, &sl));
        BRAID_CHECK(staged_sources(x, *g, in + off * es, len, src));
        char *mine = braid_direct_data(d, me, s, lb);
        if (me != root) {
            dst_t one = {mine, x->pk.nt};
            reduce_all(x, src, so, sl, NULL, &one, 1);
            braid_direct_publish(d, s, t2);
            continue;
        }
        reduce_all(x, src, so, sl, out + (off + so) * es, NULL, 0);
        braid_direct_publish(d, s, t2);
        for (int k = 1; k < n; k++) {
            int j = (me + k) % n;
            BRAID_CHECK(wait_peer(x, j, s, t2));
            size_t jo, jl;
            braid_direct_slice(len, n, j, es, &jo, &jl);
            out_copy(x, out + (off + jo) * es, braid_direct_data(d, j, s, lb) + jo * es, jl * es);
        }
    }
    if (ref && me != root) BRAID_CHECK(wait_last(x, g0, *g));
    return BRAID_SUCCESS;
}

braid_result_t braid_direct_run(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    dctx_t x;
    ctx_init(&x, c, a, seq);
    src_t t;
    BRAID_CHECK(src_init(&t, c->nranks));
    braid_direct_enter(x.d, seq);
    braid_result_t res;
    switch (a->coll) {
    case BRAID_COLL_ALLREDUCE:
        res = allreduce(&x, a, t.src, t.dst);
        break;
    case BRAID_COLL_REDUCE_SCATTER:
        res = reduce_scatter(&x, a, t.src);
        break;
    case BRAID_COLL_ALLGATHER:
        res = allgather(&x, a);
        break;
    case BRAID_COLL_BROADCAST:
        res = broadcast(&x, a);
        break;
    case BRAID_COLL_REDUCE:
        res = reduce(&x, a, t.src);
        break;
    default:
        res = braid_set_error(BRAID_ERR_INTERNAL, "direct: %s is not a direct collective",
                              braid_coll_name(a->coll));
    }
    src_free(&t);
#if defined(__x86_64__)
    if (x.nt) _mm_sfence();
#endif
    braid_direct_leave(x.d);
    /* A failed call returns once no peer can still read or write its buffers in place. */
    if (res < 0 && x.exposed) {
        char why[1024];
        snprintf(why, sizeof(why), "rank %d: %s", c->rank, braid_last_error());
        braid_direct_drain(c, seq, res, why);
    }
    if (x.tl0) timeline_block(&x, (size_t)-1);
    braid_direct_pick_block(&x.pk, c, (size_t)-1); /* after an error too: the peers count it */
    return res;
}
