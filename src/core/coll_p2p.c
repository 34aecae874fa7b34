/* Entry points of the collectives that run on the send/recv connections: alltoall(v), gather,
 * scatter, allgatherv, reduce_scatterv (plans in algos/p2p_plan.c, runner in p2p.c). Each
 * takes a sequence number on the communicator like every collective, and its messages carry
 * it, so a rank that calls another collective is BRAID_ERR_MISMATCH naming both calls. The
 * count and displacement arrays are copied at the call (the i-forms may free them at once). */
#include "core/log.h"
#include "core/timeline.h"
#include "core/p2p.h"
#include "core/redop.h"
#include "core/worker.h"
#include "reduce/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void braid_pcoll_free(braid_pcoll_t *pc)
{
    free(pc->sendcounts);
    pc->sendcounts = pc->sdispls = pc->recvcounts = pc->rdispls = NULL;
}

/* Extent in elements of the blocks counts[i] at displs[i]; SIZE_MAX when it overflows. */
static size_t extent(const size_t *counts, const size_t *displs, int n)
{
    size_t e = 0;
    for (int i = 0; i < n; i++) {
        if (!counts[i]) continue;
        if (displs[i] > SIZE_MAX - counts[i]) return SIZE_MAX;
        if (displs[i] + counts[i] > e) e = displs[i] + counts[i];
    }
    return e;
}

/* The elements sendbuf and recvbuf span on rank me (0: not used; SIZE_MAX: overflow). */
static void spans(const braid_pcoll_t *pc, int n, int me, size_t *in_p, size_t *out_p)
{
    size_t in = 0, out = 0;
    switch (pc->coll) {
    case BRAID_COLL_ALLTOALL:
        in = out = pc->count * (size_t)n;
        break;
    case BRAID_COLL_ALLTOALLV:
        in = extent(pc->sendcounts, pc->sdispls, n);
        out = extent(pc->recvcounts, pc->rdispls, n);
        break;
    case BRAID_COLL_GATHER:
        in = pc->count;
        out = me == pc->root ? pc->count * (size_t)n : 0;
        break;
    case BRAID_COLL_SCATTER:
        in = me == pc->root ? pc->count * (size_t)n : 0;
        out = pc->count;
        break;
    case BRAID_COLL_ALLGATHERV:
        in = pc->count;
        out = extent(pc->recvcounts, pc->rdispls, n);
        break;
    case BRAID_COLL_REDUCE_SCATTERV:
        for (int i = 0; i < n; i++)
            in += pc->recvcounts[i];
        out = pc->recvcounts[me];
        break;
    }
    *in_p = in;
    *out_p = out;
}

/* The copy of an in-place all-to-all(v)'s input: the communicator's scratch, kept between calls
 * up to BRAID_PCOLL_SCRATCH_KEEP bytes; a larger one is allocated for the call into *owned,
 * which the caller frees. NULL when out of memory. With it, and the own block left out of the
 * copy, a 16 MiB all-to-all in place on 2 ranks (shm) took 1.0x the time out of place instead
 * of 1.8-2.3x with a copy of the whole buffer into a fresh allocation per call. */
#define BRAID_PCOLL_SCRATCH_KEEP ((size_t)64 << 20)
static char *scratch(struct braid_comm *comm, size_t bytes, void **owned)
{
    if (bytes > BRAID_PCOLL_SCRATCH_KEEP) return *owned = malloc(bytes);
    if (comm->pc_scratch_bytes < bytes) {
        free(comm->pc_scratch);
        comm->pc_scratch_bytes = 0;
        comm->pc_scratch = malloc(bytes);
        if (!comm->pc_scratch) return NULL;
        comm->pc_scratch_bytes = bytes;
    }
    return comm->pc_scratch;
}

braid_result_t braid_pcoll_execute(struct braid_comm *comm, const braid_pcoll_t *pc, int call)
{
    uint32_t seq = ++comm->seq;
    const char *name = braid_coll_name(pc->coll);
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "%s #%u: %s", name, seq,
                               braid_comm_abort_reason(comm));
    int err = atomic_load(&comm->error);
    if (err) return braid_set_error(err, "communicator failed earlier: %s", comm->errmsg);
    int n = comm->nranks;
    size_t es = braid_dtype_size(pc->dtype);
    const braid_pcoll_t *orig = pc;
    braid_pcoll_t p = *pc;
    void *tmp = NULL, *staged = NULL;
    braid_result_t res;
    size_t in_e, out_e;
    spans(pc, n, comm->rank, &in_e, &out_e);
    if (pc->dev_send || pc->dev_recv) { /* device buffers: host images (p2p_dev.c) */
        res = braid_pcoll_stage_in(comm, &p, in_e * es, out_e * es, &staged);
        if (res < 0) goto fail;
        pc = &p; /* the in-place copy and PreMulSum below read the host image */
    }
    /* alltoall(v) in place: the input is read from a copy (alltoall: of the other ranks'
     * blocks only, its own stays where it is), in the communicator's kept scratch. */
    if ((pc->coll == BRAID_COLL_ALLTOALL || pc->coll == BRAID_COLL_ALLTOALLV) && pc->sendbuf &&
        pc->sendbuf == pc->recvbuf) {
        size_t elems = pc->coll == BRAID_COLL_ALLTOALL ? pc->count * (size_t)n
                                                       : extent(pc->sendcounts, pc->sdispls, n);
        if (pc->coll == BRAID_COLL_ALLTOALL && n == 1) {
            p.own_in_place = 1; /* nothing to copy: the own block is all */
        } else if (elems) {
            char *copy = scratch(comm, elems * es, &tmp);
            if (!copy) {
                res = braid_set_error(BRAID_ERR_NOMEM, "%s #%u: out of memory for %zu elements",
                                      name, seq, elems);
                goto fail;
            }
            if (pc->coll == BRAID_COLL_ALLTOALL) {
                size_t blk = pc->count * es, me = (size_t)comm->rank;
                const char *in = pc->sendbuf;
                memcpy(copy, in, me * blk);
                memcpy(copy + (me + 1) * blk, in + (me + 1) * blk, ((size_t)n - me - 1) * blk);
                p.own_in_place = 1;
            } else {
                memcpy(copy, pc->sendbuf, elems * es);
            }
            p.sendbuf = copy;
        }
    }
    /* PreMulSum, and avg of float16/bfloat16/float8 (NCCL's ncclAvg, a PreMulSum by 1/nranks:
     * reduce.h): the input scaled into a copy, then summed (the messages still say avg). */
    int avg_pre = pc->op == BRAID_AVG && braid_reduce_avg_prescales(pc->dtype);
    if ((pc->premul || avg_pre) && pc->coll == BRAID_COLL_REDUCE_SCATTERV) {
        size_t elems = 0;
        for (int i = 0; i < n; i++)
            elems += pc->recvcounts[i];
        if (elems) {
            tmp = malloc(elems * es);
            if (!tmp) {
                res = braid_set_error(BRAID_ERR_NOMEM,
                                      "%s #%u: out of memory for the %s input (%zu elements)", name,
                                      seq, avg_pre ? "pre-scaled avg" : "premulsum", elems);
                goto fail;
            }
            if (avg_pre)
                braid_reduce_avg_prescale(pc->dtype, tmp, pc->sendbuf, elems, n);
            else
                braid_reduce_scale(pc->dtype, tmp, pc->sendbuf, elems, &pc->scalar);
            p.sendbuf = tmp;
        }
    }
    braid_p2p_op_t ops_st[8]; /* the plan of up to 4 ranks' all-to-all: no allocation */
    braid_p2p_batch_t b = BRAID_P2P_BATCH_ON(ops_st, 8);
    uint64_t tl0 = braid_timeline_enabled() ? braid_now_ns() : 0;
    res = braid_pcoll_plan(&p, n, comm->rank, seq, &b);
    for (int i = 0; i < b.nops; i++)
        b.ops[i].call = call;
    if (res >= 0) res = braid_p2p_run(comm, &b, NULL, NULL, NULL);
    if (tl0 && res >= 0) {
        uint64_t bytes = 0;
        for (int i = 0; i < b.nops; i++)
            if (b.ops[i].kind == BRAID_P2P_SEND || b.ops[i].kind == BRAID_P2P_COPY)
                bytes += b.ops[i].count * es;
        int reduces = pc->coll == BRAID_COLL_REDUCE_SCATTERV;
        int rooted = pc->coll == BRAID_COLL_GATHER || pc->coll == BRAID_COLL_SCATTER;
        braid_tl_event_t ev = {.name = name,
                               .kind = BRAID_TL_CALL,
                               .t0 = tl0,
                               .t1 = braid_now_ns(),
                               .seq = seq,
                               .count = es ? bytes / es : 0,
                               .bytes = bytes,
                               .dtype = (int16_t)pc->dtype,
                               .op = !reduces     ? -1
                                     : pc->premul ? BRAID_NUM_OPS
                                                  : (int16_t)pc->op,
                               .algo = -1,
                               .root = rooted ? pc->root : -1,
                               .send_peer = -1,
                               .recv_peer = -1};
        braid_timeline_add(comm, &ev);
    }
    braid_p2p_batch_free(&b);
    free(tmp);
    if (staged) {
        braid_result_t sres =
            braid_pcoll_stage_out(comm, orig, &p, res >= 0 ? out_e * es : 0, staged);
        if (res >= 0) res = sres;
    }
    if (res < 0) braid_comm_fail_call(comm, res);
    return res;
fail: /* before anything was sent: nothing but the host images to free */
    braid_dev_shadow_put(staged);
    braid_comm_fail_call(comm, res);
    return res;
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

#define ARG_ERR(...) braid_set_error(BRAID_ERR_INVALID_ARG, __VA_ARGS__)

typedef struct {
    size_t disp, count;
    int rank;
} block_t;

static int block_cmp(const void *a, const void *b)
{
    const block_t *x = a, *y = b;
    if (x->disp != y->disp) return x->disp < y->disp ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Receive blocks (counts[i] elements at displs[i], each within the byte limit checked before)
 * that overlap would be written by two peers in an order nobody chose: refused, naming the
 * first pair found. Sorted by displacement (then rank), blocks overlap exactly when one starts
 * before the end of the one before it (the blocks before that one being disjoint, it ends
 * furthest); blocks of no elements never overlap. */
static braid_result_t check_recv_blocks(const char *name, const char *dname, int n,
                                        const size_t *counts, const size_t *displs)
{
    block_t *bl = malloc((size_t)n * sizeof(*bl));
    if (!bl) return braid_set_error(BRAID_ERR_NOMEM, "%s: out of memory for %d blocks", name, n);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (counts[i]) bl[k++] = (block_t){displs[i], counts[i], i};
    qsort(bl, (size_t)k, sizeof(*bl), block_cmp);
    braid_result_t res = BRAID_SUCCESS;
    for (int i = 1; i < k && res == BRAID_SUCCESS; i++) {
        const block_t *a = &bl[i - 1], *b = &bl[i];
        if (b->disp < a->disp + a->count)
            res = ARG_ERR("%s: the receive blocks of rank %d (%s[%d]=%zu, recvcounts[%d]=%zu) "
                          "and rank %d (%s[%d]=%zu, recvcounts[%d]=%zu) overlap",
                          name, a->rank, dname, a->rank, a->disp, a->rank, a->count, b->rank, dname,
                          b->rank, b->disp, b->rank, b->count);
    }
    free(bl);
    return res;
}

/* Checks one call's arguments (and resolves a created op); the message names the argument. */
static braid_result_t validate(struct braid_comm *comm, braid_pcoll_t *pc)
{
    const char *name = braid_coll_name(pc->coll);
    int n = comm->nranks, me = comm->rank;
    if ((unsigned)pc->dtype >= BRAID_NUM_DTYPES)
        return ARG_ERR("%s: dtype=%d is not a braid_datatype_t", name, (int)pc->dtype);
    if (pc->coll == BRAID_COLL_REDUCE_SCATTERV && (unsigned)pc->op >= BRAID_NUM_OPS) {
        braid_op_args_t a = {.coll = pc->coll, .dtype = pc->dtype, .op = pc->op};
        BRAID_CHECK(braid_redop_resolve(comm, &a, name)); /* a PreMulSum op of comm */
        pc->premul = 1;
        pc->scalar = a.scalar;
        pc->op = (braid_redop_t)BRAID_OP_WIRE_PREMULSUM;
    }
    int rooted = pc->coll == BRAID_COLL_GATHER || pc->coll == BRAID_COLL_SCATTER;
    if (rooted && (pc->root < 0 || pc->root >= n))
        return ARG_ERR("%s: root=%d is outside [0, nranks=%d)", name, pc->root, n);
    size_t es = braid_dtype_size(pc->dtype), lim = (SIZE_MAX / 4) / es / (size_t)n;
    const size_t *arrs[4] = {pc->sendcounts, pc->sdispls, pc->recvcounts, pc->rdispls};
    static const char *arr_names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
    const char *names[4] = {arr_names[0], arr_names[1], arr_names[2], arr_names[3]};
    int need[4] = {0, 0, 0, 0};
    if (pc->coll == BRAID_COLL_ALLTOALLV) need[0] = need[1] = need[2] = need[3] = 1;
    if (pc->coll == BRAID_COLL_ALLGATHERV) {
        need[2] = need[3] = 1;
        names[3] = "displs";
    }
    if (pc->coll == BRAID_COLL_REDUCE_SCATTERV) need[2] = 1;
    for (int k = 0; k < 4; k++) {
        if (!need[k]) continue;
        if (!arrs[k]) return ARG_ERR("%s: %s is NULL", name, names[k]);
        for (int i = 0; i < n; i++)
            if (arrs[k][i] > lim)
                return ARG_ERR("%s: %s[%d]=%zu overflows the byte size", name, names[k], i,
                               arrs[k][i]);
    }
    if (pc->count > lim) return ARG_ERR("%s: count=%zu overflows the byte size", name, pc->count);
    if (pc->coll == BRAID_COLL_ALLTOALLV || pc->coll == BRAID_COLL_ALLGATHERV)
        BRAID_CHECK(check_recv_blocks(name, names[3], n, pc->recvcounts, pc->rdispls));
    if (pc->coll == BRAID_COLL_ALLGATHERV && pc->count != pc->recvcounts[me])
        return ARG_ERR("%s: sendcount=%zu differs from recvcounts[%d]=%zu", name, pc->count, me,
                       pc->recvcounts[me]);
    /* This rank's own block is a local copy of recvcounts[me] elements that no peer checks:
     * a larger sendcounts[me] would drop data silently, a smaller one read past the send block
     * (past the in-place copy, or from a NULL sendbuf that spans nothing). */
    if (pc->coll == BRAID_COLL_ALLTOALLV && pc->sendcounts[me] != pc->recvcounts[me])
        return ARG_ERR("%s: sendcounts[%d]=%zu differs from recvcounts[%d]=%zu (this rank's own "
                       "block)",
                       name, me, pc->sendcounts[me], me, pc->recvcounts[me]);
    /* The elements each buffer spans on this rank (0: not used). */
    size_t in, out;
    spans(pc, n, me, &in, &out);
    if (in == SIZE_MAX || out == SIZE_MAX || in > lim * (size_t)n || out > lim * (size_t)n)
        return ARG_ERR("%s: the displacements overflow the byte size", name);
    if (in && !pc->sendbuf) return ARG_ERR("%s: sendbuf is NULL with data to send", name);
    if (out && !pc->recvbuf) return ARG_ERR("%s: recvbuf is NULL with data to receive", name);
    in *= es;
    out *= es;
    if (pc->sendbuf == pc->recvbuf || !overlaps(pc->sendbuf, in, pc->recvbuf, out))
        return BRAID_SUCCESS; /* alltoall(v) in place reads a copy; the others check below */
    const char *s = pc->sendbuf, *o = pc->recvbuf;
    int in_place = 0;
    switch (pc->coll) {
    case BRAID_COLL_GATHER:
        in_place = s == o + (size_t)me * pc->count * es;
        break;
    case BRAID_COLL_SCATTER:
        in_place = o == s + (size_t)me * pc->count * es;
        break;
    case BRAID_COLL_ALLGATHERV:
        in_place = s == o + pc->rdispls[me] * es;
        break;
    case BRAID_COLL_REDUCE_SCATTERV: {
        size_t off = 0;
        for (int i = 0; i < me; i++)
            off += pc->recvcounts[i];
        in_place = o == s + off * es;
        break;
    }
    }
    if (!in_place) return ARG_ERR("%s: sendbuf and recvbuf overlap without being in place", name);
    return BRAID_SUCCESS;
}

/* A call's same-buffer in-place forms for gather/scatter/allgatherv/reduce_scatterv: sendbuf
 * == recvbuf is accepted as in place when it is the documented position too; validate()
 * returns early for sendbuf == recvbuf, so check those here. */
static braid_result_t check_same_buffer(struct braid_comm *comm, const braid_pcoll_t *pc)
{
    if (!pc->sendbuf || pc->sendbuf != pc->recvbuf) return BRAID_SUCCESS;
    if (pc->coll == BRAID_COLL_ALLTOALL || pc->coll == BRAID_COLL_ALLTOALLV) return BRAID_SUCCESS;
    int me = comm->rank;
    size_t pos = 0;
    switch (pc->coll) {
    case BRAID_COLL_GATHER:
        if (me != pc->root) return BRAID_SUCCESS;
        pos = (size_t)me * pc->count;
        break;
    case BRAID_COLL_SCATTER:
        if (me != pc->root) return BRAID_SUCCESS;
        pos = (size_t)me * pc->count;
        break;
    case BRAID_COLL_ALLGATHERV:
        pos = pc->rdispls[me];
        break;
    case BRAID_COLL_REDUCE_SCATTERV:
        for (int i = 0; i < me; i++)
            pos += pc->recvcounts[i];
        break;
    }
    if (pos == 0) return BRAID_SUCCESS;
    return ARG_ERR("%s: sendbuf == recvbuf is in place only at this rank's block (offset %zu "
                   "elements)",
                   braid_coll_name(pc->coll), pos);
}

/* Copies the arrays the collective uses into one allocation owned by pc. */
static braid_result_t copy_arrays(struct braid_comm *comm, braid_pcoll_t *pc)
{
    size_t n = (size_t)comm->nranks;
    const size_t *src[4] = {pc->sendcounts, pc->sdispls, pc->recvcounts, pc->rdispls};
    if (!src[0] && !src[1] && !src[2] && !src[3]) return BRAID_SUCCESS; /* not a v form */
    size_t *all = calloc(4 * n, sizeof(size_t));
    if (!all) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %zu counts", 4 * n);
    size_t **dst[4] = {&pc->sendcounts, &pc->sdispls, &pc->recvcounts, &pc->rdispls};
    for (int k = 0; k < 4; k++) {
        if (src[k]) memcpy(all + (size_t)k * n, src[k], n * sizeof(size_t));
        *dst[k] = src[k] ? all + (size_t)k * n : NULL;
    }
    pc->sendcounts = all; /* the allocation braid_pcoll_free frees (zeros when unused) */
    return BRAID_SUCCESS;
}

/* "rejected its alltoall #4 (count 6, float32) (the reason)" for messages. */
static void rejected_str(const braid_msg_hdr_t *desc, const char *reason, char *buf, size_t len)
{
    if (desc->coll == BRAID_COLL_GROUP) {
        snprintf(buf, len, "sends and receives of a group (#%u) (%.200s)", desc->seq, reason);
        return;
    }
    snprintf(buf, len, "%s #%u (count %llu, %s) (%.200s)", braid_coll_name(desc->coll), desc->seq,
             (unsigned long long)desc->count, braid_dtype_name(desc->dtype), reason);
}

/* One peer's message of the rejected call's number (or anything else: a mismatch). */
static braid_result_t reject_take(struct braid_comm *comm, int p, const braid_msg_hdr_t *desc,
                                  const char *mine, int *got)
{
    braid_conn_t *c = braid_p2p_conn(comm, p, 0);
    if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
    const braid_msg_hdr_t *h;
    const void *buf;
    braid_result_t res = c->ops->recv_get(c, &h, &buf);
    if (res == BRAID_INPROGRESS) return BRAID_SUCCESS;
    BRAID_CHECK(res);
    if (h->flags & BRAID_MSG_NOTICE)
        return braid_p2p_take_notice(comm, p, h, desc->seq, "rejected its", mine);
    if (h->seq == desc->seq && h->coll == desc->coll && (h->flags & BRAID_MSG_REJECTED)) {
        /* rejected there too */
        BRAID_CHECK(c->ops->recv_release(c));
        *got = 1;
        return BRAID_SUCCESS;
    }
    char theirs[200], why[201];
    braid_p2p_hdr_str(h, comm->rank, theirs, sizeof(theirs));
    if (h->flags & BRAID_MSG_REJECTED) {
        braid_p2p_reason(h, buf, c->slot_size, why, sizeof(why));
        return braid_set_error(BRAID_ERR_MISMATCH,
                               "rank %d rejected its %s (%s) but rank %d rejected its %s", p,
                               theirs, why, comm->rank, mine);
    }
    return braid_set_error(BRAID_ERR_MISMATCH, "rank %d called %s but rank %d rejected its %s", p,
                           theirs, comm->rank, mine);
}

/* Posts the REJECTED header-only message (payload: the reason) to peer p when a slot is free. */
static braid_result_t reject_give(struct braid_comm *comm, int p, const braid_msg_hdr_t *desc,
                                  const char *reason, int *sent)
{
    braid_conn_t *c = braid_p2p_conn(comm, p, 1);
    if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
    void *slot;
    braid_result_t res = c->ops->send_get(c, &slot);
    if (res == BRAID_INPROGRESS) return BRAID_SUCCESS;
    BRAID_CHECK(res);
    size_t n = strlen(reason);
    if (n > 200) n = 200;
    if (n > c->slot_size) n = c->slot_size;
    memcpy(slot, reason, n);
    braid_msg_hdr_t h = *desc;
    h.bytes = (uint32_t)n;
    h.flags = BRAID_MSG_REJECTED;
    BRAID_CHECK(c->ops->send_post(c, &h));
    *sent = 1;
    return BRAID_SUCCESS;
}

/* The rejected call's exchange on the send/recv connections (braid_call_reject): a REJECTED
 * message to every peer, then one message of that number from every peer. Every rank of these
 * collectives sends to or receives from the root or every other rank, so a peer that called
 * the collective finds the rejection in its own call (or this rank finds the peer's data), and
 * the one that finds it fails the communicator and tells the others. All REJECTED: nothing
 * ran anywhere, BRAID_SUCCESS. A peer in a ring/tree collective of that number is seen on the
 * engine's connections. */
braid_result_t braid_pcoll_reject_exchange(struct braid_comm *comm, const braid_msg_hdr_t *desc,
                                           const char *reason, const void *arg)
{
    (void)arg;
    int n = comm->nranks, me = comm->rank;
    int *sent = calloc((size_t)n * 2, sizeof(int)), *got = sent + n;
    if (!sent) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d peers", n);
    sent[me] = got[me] = 1;
    char mine[300];
    rejected_str(desc, reason, mine, sizeof(mine));
    uint64_t start = braid_now_ns(), timeout_ns = braid_timeout_ns(comm->timeout_s);
    braid_result_t res = BRAID_SUCCESS;
    for (unsigned turn = 0; res >= 0; turn++) {
        int left = 0, wp = -1, wsend = 0;
        for (int p = 0; p < n && res >= 0; p++) {
            if (!sent[p]) res = reject_give(comm, p, desc, reason, &sent[p]);
            if (res >= 0 && !got[p]) res = reject_take(comm, p, desc, mine, &got[p]);
            if (res >= 0 && (!sent[p] || !got[p])) {
                if (wp < 0 || (turn + (unsigned)p) % 2) {
                    wp = p;
                    wsend = !sent[p];
                }
                left++;
            }
        }
        if (res < 0 || !left) break;
        res = braid_p2p_coll_foreign(comm, desc->seq, -1, "rejected its", mine);
        if (res < 0) break;
        if (atomic_load(&comm->aborted)) {
            res = braid_set_error(BRAID_ERR_ABORTED, "%s", braid_comm_abort_reason(comm));
            break;
        }
        uint64_t now = braid_now_ns();
        if (now - start > timeout_ns) {
            res = braid_set_error(BRAID_ERR_TIMEOUT,
                                  "timed out after %.1f s waiting for rank %d in %s #%u, which "
                                  "this rank rejected",
                                  comm->timeout_s, wp, braid_coll_name(desc->coll), desc->seq);
            break;
        }
        braid_conn_t *c = braid_p2p_conn(comm, wp, wsend);
        res = c->ops->wait(c, wsend ? BRAID_WAIT_SEND : BRAID_WAIT_RECV, now + 1000000ull);
    }
    free(sent);
    return res;
}

/* Which of the buffers the call uses are device memory (staged: p2p_dev.c). */
static braid_result_t dev_buffers(struct braid_comm *comm, braid_pcoll_t *pc)
{
    const char *name = braid_coll_name(pc->coll);
    size_t in, out;
    spans(pc, comm->nranks, comm->rank, &in, &out);
    if (in) BRAID_CHECK(braid_dev_buf_check(comm, name, "sendbuf", pc->sendbuf, &pc->dev_send));
    if (out) BRAID_CHECK(braid_dev_buf_check(comm, name, "recvbuf", pc->recvbuf, &pc->dev_recv));
    return BRAID_SUCCESS;
}

static braid_result_t pcoll_call_in(braid_pcoll_t pc, braid_comm_t comm, int iform,
                                    braid_request_t *req_p)
{
    const char *name = braid_coll_name(pc.coll);
    braid_result_t res = BRAID_SUCCESS;
    if (iform && !req_p) res = ARG_ERR("%s: req_p is NULL", name);
    if (res >= 0) res = validate(comm, &pc);
    if (res >= 0) res = check_same_buffer(comm, &pc);
    if (res >= 0) res = dev_buffers(comm, &pc);
    if (res >= 0 && (pc.dev_send || pc.dev_recv)) res = braid_dev_ready(comm);
    if (braid_group_depth() > 0) {
        braid_group_note(res, name);
        if (res < 0) { /* group end reports it, issues nothing of the group, tells the peers */
            braid_group_item_t it = {.kind = BRAID_ITEM_PCOLL, .pc = pc};
            return braid_group_add_rejected(comm, &it, res);
        }
    }
    if (res < 0) {
        braid_msg_hdr_t desc = {.coll = (uint8_t)pc.coll,
                                .dtype = (uint8_t)pc.dtype,
                                .op = (uint8_t)pc.op,
                                .root = pc.root,
                                .count = pc.count};
        return braid_call_reject(comm, desc, res, braid_pcoll_reject_exchange, NULL);
    }
    BRAID_CHECK(copy_arrays(comm, &pc));
    if (braid_group_depth() > 0) return braid_group_add_pcoll(comm, &pc, iform ? req_p : NULL);
    if (!iform && !braid_worker_pending(comm)) {
        res = braid_pcoll_execute(comm, &pc, 0);
        braid_pcoll_free(&pc);
        return res;
    }
    struct braid_request *req = calloc(1, sizeof(*req));
    braid_task_t *t = calloc(1, sizeof(*t));
    if (!req || !t) {
        free(req);
        free(t);
        braid_pcoll_free(&pc);
        return braid_set_error(BRAID_ERR_NOMEM, "%s: out of memory for a request", name);
    }
    t->kind = BRAID_TASK_PCOLL;
    t->pc = pc;
    req->comm = comm;
    req->task = t;
    res = braid_worker_submit(comm, req);
    if (res < 0) {
        free(req);
        free(t);
        braid_pcoll_free(&pc);
        return res;
    }
    if (iform) {
        *req_p = req;
        return BRAID_SUCCESS;
    }
    return braid_wait(req);
}

/* As every collective entry: the communicator is entered by one thread at a time. */
static braid_result_t pcoll_call(braid_pcoll_t pc, braid_comm_t comm, int iform,
                                 braid_request_t *req_p)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, braid_coll_name(pc.coll)));
    braid_result_t res = pcoll_call_in(pc, comm, iform, req_p);
    braid_comm_leave_call(comm);
    return res;
}

#define PC(c, s, r, n, d, o, rt)                                                                   \
    (braid_pcoll_t)                                                                                \
    {                                                                                              \
        .coll = (c), .sendbuf = (s), .recvbuf = (r), .count = (n), .dtype = (d), .op = (o),        \
        .root = (rt)                                                                               \
    }

static braid_pcoll_t pc_v(int coll, const void *s, const size_t *sc, const size_t *sd, void *r,
                          const size_t *rc, const size_t *rd, size_t count, braid_datatype_t dt,
                          braid_redop_t op)
{
    braid_pcoll_t pc = PC(coll, s, r, count, dt, op, -1);
    pc.sendcounts = (size_t *)sc;
    pc.sdispls = (size_t *)sd;
    pc.recvcounts = (size_t *)rc;
    pc.rdispls = (size_t *)rd;
    return pc;
}

braid_result_t braid_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                              braid_datatype_t dtype, braid_comm_t comm)
{
    return pcoll_call(PC(BRAID_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, 0, -1), comm, 0,
                      NULL);
}

braid_result_t braid_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                               braid_datatype_t dtype, braid_comm_t comm, braid_request_t *req_p)
{
    return pcoll_call(PC(BRAID_COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, 0, -1), comm, 1,
                      req_p);
}

braid_result_t braid_alltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                               void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                               braid_datatype_t dtype, braid_comm_t comm)
{
    return pcoll_call(pc_v(BRAID_COLL_ALLTOALLV, sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                           rdispls, 0, dtype, 0),
                      comm, 0, NULL);
}

braid_result_t braid_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, braid_datatype_t dtype, braid_comm_t comm,
                                braid_request_t *req_p)
{
    return pcoll_call(pc_v(BRAID_COLL_ALLTOALLV, sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                           rdispls, 0, dtype, 0),
                      comm, 1, req_p);
}

braid_result_t braid_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            braid_datatype_t dtype, int root, braid_comm_t comm)
{
    return pcoll_call(PC(BRAID_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype, 0, root), comm, 0,
                      NULL);
}

braid_result_t braid_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                             braid_datatype_t dtype, int root, braid_comm_t comm,
                             braid_request_t *req_p)
{
    return pcoll_call(PC(BRAID_COLL_GATHER, sendbuf, recvbuf, sendcount, dtype, 0, root), comm, 1,
                      req_p);
}

braid_result_t braid_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                             braid_datatype_t dtype, int root, braid_comm_t comm)
{
    return pcoll_call(PC(BRAID_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype, 0, root), comm, 0,
                      NULL);
}

braid_result_t braid_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                              braid_datatype_t dtype, int root, braid_comm_t comm,
                              braid_request_t *req_p)
{
    return pcoll_call(PC(BRAID_COLL_SCATTER, sendbuf, recvbuf, recvcount, dtype, 0, root), comm, 1,
                      req_p);
}

braid_result_t braid_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                const size_t *recvcounts, const size_t *displs,
                                braid_datatype_t dtype, braid_comm_t comm)
{
    return pcoll_call(pc_v(BRAID_COLL_ALLGATHERV, sendbuf, NULL, NULL, recvbuf, recvcounts, displs,
                           sendcount, dtype, 0),
                      comm, 0, NULL);
}

braid_result_t braid_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                 const size_t *recvcounts, const size_t *displs,
                                 braid_datatype_t dtype, braid_comm_t comm, braid_request_t *req_p)
{
    return pcoll_call(pc_v(BRAID_COLL_ALLGATHERV, sendbuf, NULL, NULL, recvbuf, recvcounts, displs,
                           sendcount, dtype, 0),
                      comm, 1, req_p);
}

braid_result_t braid_reduce_scatterv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                     braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm)
{
    return pcoll_call(pc_v(BRAID_COLL_REDUCE_SCATTERV, sendbuf, NULL, NULL, recvbuf, recvcounts,
                           NULL, 0, dtype, op),
                      comm, 0, NULL);
}

braid_result_t braid_ireduce_scatterv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                      braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm,
                                      braid_request_t *req_p)
{
    return pcoll_call(pc_v(BRAID_COLL_REDUCE_SCATTERV, sendbuf, NULL, NULL, recvbuf, recvcounts,
                           NULL, 0, dtype, op),
                      comm, 1, req_p);
}
