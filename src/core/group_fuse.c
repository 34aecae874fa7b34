/* A group's small collectives fused into one call (braid_group_end; see p2p.h).
 *
 * A group's collectives run in call order, each one a whole collective with its own latency:
 * eight all-reduces of 64 floats cost eight times one. Where consecutive collectives of a group
 * (its sends and receives, which run after them, left aside) are small calls of one kind, they
 * run as one call of their buffers packed together (as NCCL's aggregated group launch and
 * Horovod's tensor fusion): one latency, and the packing copies, which are small by the bound.
 * - all-reduces of one dtype and op: one all-reduce of the inputs end to end;
 * - reduce-scatters of one dtype and op: one reduce-scatter whose block for rank r holds every
 *   call's block r in turn;
 * - all-gathers of any dtypes: one all-gather of bytes, each rank's block every call's input;
 * - broadcasts of one root (any dtypes): one broadcast of bytes, the root's inputs end to end;
 * - reduces of one root, dtype and op (not avg): one reduce of the inputs end to end.
 * Bounds: a run's largest buffers (the all-reduce's, the reduce-scatter's input, the
 * all-gather's output, the broadcast's and reduce's one) add up to at most
 * BRAID_GROUP_FUSE_BYTES, each at most a quarter of it.
 * Measured (eight all-reduces per group, 64 KiB): 256 B-8 KiB calls took 0.4-0.8x the time
 * without fusion (0.2x with 4 ranks on 2 cpus or over tcp), 16 KiB ones 0.65-0.96x; 32 KiB ones
 * fused in pairs took up to 1.2x on 2 ranks (shared memory), hence the quarter (RESULTS.md).
 *
 * Every rank must group alike, so the choice depends only on what matching calls agree on
 * (collective, count, dtype, op, root, and the limit, which every rank should set alike),
 * never on buffers. The fused call's descriptor carries the layout (braid_op_args_t.fused: the
 * number of calls and a hash of their counts, and dtypes where bytes are packed), so ranks
 * whose calls differ but add up to the same size get BRAID_ERR_MISMATCH, not each other's
 * data. The layout rides in the top half of the descriptor's count (braid_engine_desc,
 * engine.h), not in its root: a broadcast's or reduce's root field holds its root, which the
 * ranks must agree on as well. The count is the one field that has room to spare (argument
 * checks refuse counts from 2^56; a fused count is below 2^32) and that every path already
 * carries and compares: the ring engine's headers and descriptor exchange, the direct path's
 * lines, tcp frames, the rejected-call exchange, and the hierarchical algorithms' stages,
 * which take the layout from their parent call (algos/hier.c). A wider header with a field of
 * its own would change the wire formats of every transport and the direct path's 64-byte line.
 *
 * What only one rank knows: a call whose input is an earlier call's output in the same run
 * (call order matters there), or device buffers. For the unrooted calls such a rank cannot
 * pack its inputs, so each rank's part of the fused call carries one more element, a flag:
 * the op's identity (a zero byte for all-gathers) from a rank that could pack, another value
 * (which the reduction keeps different from the identity) from one that could not. If any
 * rank's flag is not the identity every rank sees it (reduced, or gathered), leaves its outputs
 * untouched and runs the calls one by one as without fusion.
 * Rooted calls need no flag, and could not use one: data flows one way (a non-root's flag
 * would never reach the others in a broadcast, nor the root's in a reduce). They need none
 * because only the root can have a call that reads an earlier one's output (a broadcast reads
 * nothing on the other ranks, a reduce writes nothing there), and the root settles it alone:
 * - broadcast: the root copies each input into the fused buffer and then to its own output,
 *   call by call, so a later input is read after the earlier outputs are written, as one by
 *   one; the other ranks copy the fused buffer to their outputs in call order;
 * - reduce: the root packs the op's identity for an input that overlaps an earlier call's
 *   output (-0.0 for float sums, so x + id = x bit for bit), and after the fused call, in call
 *   order, writes that call's output as the fused result (the other ranks' inputs reduced)
 *   combined with its input as it then is. Only such calls reduce in another order (floats may
 *   round differently); avg is not fused: its late input would need avg's own last step
 *   (the division of the whole sum, or for float16/bfloat16/float8 the pre-scaling by 1/n,
 *   core/redop.h).
 * Device buffers: rooted calls fuse only where no rank has a CUDA device (set at init, alike on
 * every rank), so no rooted call of a fused run can hold one. */
#include "core/config.h"
#include "core/log.h"
#include "core/p2p.h"
#include "core/worker.h"
#include "reduce/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

braid_result_t braid_group_fuse_init(struct braid_comm *comm)
{
    int64_t v = comm->fuse_bytes_set; /* read and agreed on at init (core/settings.c) */
    if (v < 0 || v > (64 << 20))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_GROUP_FUSE_BYTES=%lld is outside [0, 64 MiB]", (long long)v);
    int devices = 0; /* every rank's information is the same on every rank: they agree */
    for (int r = 0; r < comm->nranks; r++)
        devices += comm->peers[r].cuda_dev >= 0;
    comm->fuse_bytes = devices == comm->nranks || comm->nranks < 2 ? 0 : (size_t)v;
    comm->fuse_rooted = devices == 0;
    if (!comm->fuse_bytes) return BRAID_SUCCESS;
    comm->fuse_buf = malloc(comm->fuse_bytes + 64 * (size_t)comm->nranks);
    if (!comm->fuse_buf)
        return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the fused calls' buffer");
    return BRAID_SUCCESS;
}

/* The value 1 of dtype in one element (0 is all zero bits in every dtype). */
static void dtype_one(braid_datatype_t dt, void *out)
{
    memset(out, 0, 8);
    switch (dt) {
    case BRAID_FLOAT16:
        *(uint16_t *)out = 0x3c00;
        break;
    case BRAID_BFLOAT16:
        *(uint16_t *)out = 0x3f80;
        break;
    case BRAID_FLOAT32:
        *(float *)out = 1.0f;
        break;
    case BRAID_FLOAT64:
        *(double *)out = 1.0;
        break;
    case BRAID_FLOAT8_E4M3:
        *(uint8_t *)out = 0x38;
        break;
    case BRAID_FLOAT8_E5M2:
        *(uint8_t *)out = 0x3c;
        break;
    default: /* integers, little-endian */
        *(uint8_t *)out = 1;
        break;
    }
}

static int is_float(braid_datatype_t dt)
{
    return dt == BRAID_FLOAT16 || dt == BRAID_BFLOAT16 || dt == BRAID_FLOAT32 ||
           dt == BRAID_FLOAT64 || dt == BRAID_FLOAT8_E4M3 || dt == BRAID_FLOAT8_E5M2;
}

/* The identity of op in dtype, one element: x op id = x bit for bit for every x (sum: -0.0,
 * since +0.0 turns a -0.0 into +0.0; min and max: the extremes, float8 e4m3's finite ones). */
static void dtype_identity(braid_datatype_t dt, braid_redop_t op, void *out)
{
    static const struct {
        uint64_t hi, lo; /* the largest and smallest values' bits */
    } ext[BRAID_NUM_DTYPES] = {
        [BRAID_INT8] = {0x7f, 0x80},
        [BRAID_UINT8] = {0xff, 0},
        [BRAID_INT32] = {0x7fffffff, 0x80000000},
        [BRAID_UINT32] = {0xffffffff, 0},
        [BRAID_INT64] = {0x7fffffffffffffff, 0x8000000000000000},
        [BRAID_UINT64] = {UINT64_MAX, 0},
        [BRAID_FLOAT16] = {0x7c00, 0xfc00},                         /* +-inf */
        [BRAID_BFLOAT16] = {0x7f80, 0xff80},                        /* +-inf */
        [BRAID_FLOAT32] = {0x7f800000, 0xff800000},                 /* +-inf */
        [BRAID_FLOAT64] = {0x7ff0000000000000, 0xfff0000000000000}, /* +-inf */
        [BRAID_FLOAT8_E4M3] = {0x7e, 0xfe},                         /* +-448: no inf */
        [BRAID_FLOAT8_E5M2] = {0x7c, 0xfc},                         /* +-inf */
    };
    size_t es = braid_dtype_size(dt);
    uint64_t v = 0;
    if (op == BRAID_PROD) {
        dtype_one(dt, out);
        return;
    }
    if (op == BRAID_MIN) v = ext[dt].hi;
    if (op == BRAID_MAX) v = ext[dt].lo;
    if (op == BRAID_SUM && is_float(dt)) v = 1ull << (8 * es - 1); /* the sign bit: -0.0 */
    memcpy(out, &v, es);                                           /* little-endian */
}

/* The flag's values: ok (the op's identity for 0 and 1) and not ok. Sum, max and average
 * reduce 0s to 0 and any 1 to a positive value (a float16/bfloat16/float8 average scales each
 * 1 to 1/n first, core/redop.h; integer sums of 1s wrap only from 256 ranks for 8-bit types,
 * float8's 1/n rounds to 0 only from 1024: such communicators do not fuse 8-bit types); product and
 * min reduce 1s to 1 and any 0 to 0. Integer averages round 1/n to 0: not fused. */
static int flag_values(braid_datatype_t dt, braid_redop_t op, int nranks, void *ok, void *bad)
{
    size_t es = braid_dtype_size(dt);
    if (es == 1 && nranks > 127) return 0;
    if (op == BRAID_AVG && !is_float(dt)) return 0;
    uint8_t one[8], zero[8] = {0};
    dtype_one(dt, one);
    switch (op) {
    case BRAID_SUM:
    case BRAID_MAX:
    case BRAID_AVG:
        memcpy(ok, zero, es);
        memcpy(bad, one, es);
        return 1;
    case BRAID_PROD:
    case BRAID_MIN:
        memcpy(ok, one, es);
        memcpy(bad, zero, es);
        return 1;
    default:
        return 0;
    }
}

/* Whether item it may be part of a fused run; *bytes_p: its largest buffer's size (what the
 * bounds count). */
static int fusable(const struct braid_comm *comm, const braid_group_item_t *it, size_t *bytes_p)
{
    if (it->kind != BRAID_ITEM_COLL || it->fused) return 0;
    const braid_op_args_t *a = &it->args;
    if ((unsigned)a->dtype >= BRAID_NUM_DTYPES) return 0;
    int nranks = comm->nranks;
    size_t es = braid_dtype_size(a->dtype), n = (size_t)nranks;
    if (a->count > SIZE_MAX / es / n) return 0;
    uint8_t ok[8], bad[8];
    switch (a->coll) {
    case BRAID_COLL_ALLREDUCE:
    case BRAID_COLL_REDUCE_SCATTER:
        if (a->premul || !flag_values(a->dtype, a->op, nranks, ok, bad)) return 0;
        *bytes_p = a->count * es * (a->coll == BRAID_COLL_ALLREDUCE ? 1 : n);
        return 1;
    case BRAID_COLL_ALLGATHER:
        *bytes_p = a->count * es * n;
        return 1;
    case BRAID_COLL_REDUCE: /* avg: see the top of the file */
        if (a->premul || a->op == BRAID_AVG || (unsigned)a->op >= BRAID_NUM_OPS) return 0;
        /* fall through */
    case BRAID_COLL_BROADCAST:
        if (!comm->fuse_rooted) return 0;
        *bytes_p = a->count * es;
        return 1;
    default:
        return 0;
    }
}

/* Whether b may join a run that a started: one collective, for reductions one dtype and op,
 * for rooted calls one root. */
static int same_kind(const braid_op_args_t *a, const braid_op_args_t *b)
{
    if (a->coll != b->coll) return 0;
    if (a->coll == BRAID_COLL_ALLGATHER) return 1;
    if (a->coll == BRAID_COLL_BROADCAST) return a->root == b->root;
    return a->dtype == b->dtype && a->op == b->op &&
           (a->coll != BRAID_COLL_REDUCE || a->root == b->root);
}

/* Calls whose buffers are packed as bytes, of any dtypes. */
static int packs_bytes(int coll)
{
    return coll == BRAID_COLL_ALLGATHER || coll == BRAID_COLL_BROADCAST;
}

static int rooted(int coll)
{
    return coll == BRAID_COLL_BROADCAST || coll == BRAID_COLL_REDUCE;
}

int braid_group_fuse_find(const struct braid_comm *comm, const braid_group_item_t *items, int n,
                          int from, braid_fuse_t *f)
{
    size_t limit = comm->fuse_bytes, sum = 0, total = 0;
    f->k = 0;
    size_t b = 0;
    if (!limit || !fusable(comm, &items[from], &b) || b > limit / 4) return 0;
    const braid_op_args_t *first = &items[from].args;
    int bytes = packs_bytes(first->coll);
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the counts (and dtypes, packing bytes) */
    for (int i = from; i < n && f->k < BRAID_FUSE_MAX_CALLS; i++) {
        const braid_group_item_t *it = &items[i];
        if (it->kind == BRAID_ITEM_P2P) continue; /* they run after the collectives */
        if (!fusable(comm, it, &b) || b > limit / 4 || !same_kind(first, &it->args) ||
            sum + b > limit)
            break;
        sum += b;
        /* all-gathers, broadcasts: in bytes (dtypes may differ); reductions: in elements */
        total += bytes ? it->args.count * braid_dtype_size(it->args.dtype) : it->args.count;
        uint64_t word = it->args.count ^ (bytes ? (uint64_t)it->args.dtype << 56 : 0);
        for (int k = 0; k < 8; k++) {
            h ^= (word >> (8 * k)) & 0xff;
            h *= 1099511628211ull;
        }
        f->idx[f->k++] = i;
    }
    if (f->k < 2) return f->k = 0;
    f->total = total;
    int gather = first->coll == BRAID_COLL_ALLGATHER;
    int32_t layout = (int32_t)((((h ^ (h >> 32)) & 0xffffff) << 7) | (uint64_t)f->k);
    braid_datatype_t dt = bytes ? BRAID_UINT8 : first->dtype;
    if (rooted(first->coll)) { /* no flag, no padding (see the top of the file) */
        f->args = (braid_op_args_t){.coll = first->coll,
                                    .count = total,
                                    .dtype = dt,
                                    .op = first->op,
                                    .root = first->root,
                                    .fused = layout};
        return f->k;
    }
    size_t es = braid_dtype_size(dt), line = 64 / es, count;
    if (first->coll == BRAID_COLL_ALLREDUCE) {
        /* The flag, then zeros up to a multiple of a cache line per rank: an odd count split
         * over the ranks costs more than the bytes (tcp, 2 ranks, float32: 16385 elements 36
         * us, 16384 30). */
        size_t unit = line * (size_t)comm->nranks;
        count = (total + unit) / unit * unit;
    } else {
        count = (total + line) / line * line; /* each rank's block: data, flag, zeros */
    }
    f->args = (braid_op_args_t){.coll = first->coll,
                                .count = count,
                                .dtype = dt,
                                .op = gather ? BRAID_SUM : first->op,
                                .root = -1,
                                .fused = layout};
    return f->k;
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* The bytes call a reads (in) and writes (out) on this rank. */
static void extents(const struct braid_comm *comm, const braid_op_args_t *a, size_t *in,
                    size_t *out)
{
    size_t bytes = a->count * braid_dtype_size(a->dtype);
    int root = comm->rank == a->root;
    *in = *out = bytes;
    if (a->coll == BRAID_COLL_REDUCE_SCATTER) *in *= (size_t)comm->nranks;
    if (a->coll == BRAID_COLL_ALLGATHER) *out *= (size_t)comm->nranks;
    if (a->coll == BRAID_COLL_BROADCAST && !root) *in = 0;
    if (a->coll == BRAID_COLL_REDUCE && !root) *out = 0;
}

/* Whether call j of the run reads, on this rank, memory that an earlier call of it writes. */
static int reads_earlier_output(const struct braid_comm *comm, const braid_group_item_t *items,
                                const braid_fuse_t *f, int j)
{
    const braid_op_args_t *b = &items[f->idx[j]].args;
    size_t bin, bout;
    extents(comm, b, &bin, &bout);
    for (int i = 0; i < j; i++) {
        const braid_op_args_t *a = &items[f->idx[i]].args;
        size_t ain, aout;
        extents(comm, a, &ain, &aout);
        if (overlaps(a->recvbuf, aout, b->sendbuf, bin)) return 1;
    }
    return 0;
}

/* Whether this rank cannot pack the run's inputs before any output is written. */
static int must_fall_back(const struct braid_comm *comm, const braid_group_item_t *items,
                          const braid_fuse_t *f)
{
    for (int j = 0; j < f->k; j++)
        if (items[f->idx[j]].args.on_device || reads_earlier_output(comm, items, f, j)) return 1;
    return 0;
}

/* Copies the run's inputs into buf as the fused call takes them (or zeros, when !pack), then
 * each block's flag and padding; *flag_p: where this rank's flag went. */
static void pack_inputs(const struct braid_comm *comm, const braid_group_item_t *items,
                        const braid_fuse_t *f, char *buf, int pack, size_t *flag_p)
{
    const braid_op_args_t *fa = &f->args;
    size_t es = braid_dtype_size(fa->dtype), nr = (size_t)comm->nranks;
    uint8_t ok[8] = {0}, bad[8] = {1};
    if (fa->coll != BRAID_COLL_ALLGATHER) flag_values(fa->dtype, fa->op, comm->nranks, ok, bad);
    /* The blocks this rank fills: all-reduce one (the whole call), reduce-scatter one per rank,
     * all-gather its own. */
    size_t nblocks = fa->coll == BRAID_COLL_REDUCE_SCATTER ? nr : 1;
    size_t first = fa->coll == BRAID_COLL_ALLGATHER ? (size_t)comm->rank : 0;
    size_t block_bytes = fa->count * es;
    for (size_t r = first; r < first + nblocks; r++) {
        char *blk = buf + r * block_bytes;
        size_t off = 0;
        for (int j = 0; j < f->k; j++) {
            const braid_op_args_t *b = &items[f->idx[j]].args;
            size_t bytes = b->count * braid_dtype_size(b->dtype);
            const char *src = (const char *)b->sendbuf + (nblocks > 1 ? r * bytes : 0);
            if (pack && bytes) memcpy(blk + off, src, bytes);
            off += bytes;
        }
        if (!pack) memset(blk, 0, off); /* not used: every rank falls back */
        memcpy(blk + off, pack ? ok : bad, es);
        memset(blk + off + es, 0, block_bytes - off - es);
        if (r == first) *flag_p = (size_t)(blk + off - buf);
    }
}

/* Whether every rank could pack, from the flags the fused call brought back in buf. */
static int all_packed(const struct braid_comm *comm, const braid_fuse_t *f, const char *buf,
                      size_t flag)
{
    const braid_op_args_t *fa = &f->args;
    size_t es = braid_dtype_size(fa->dtype);
    uint8_t ok[8] = {0}, bad[8];
    if (fa->coll != BRAID_COLL_ALLGATHER) {
        flag_values(fa->dtype, fa->op, comm->nranks, ok, bad);
        /* reduce-scatter: the reduced flag is in this rank's block */
        if (fa->coll == BRAID_COLL_REDUCE_SCATTER) flag += (size_t)comm->rank * fa->count * es;
        return !memcmp(buf + flag, ok, es);
    }
    /* all-gather: every rank's flag, at the same place in its block */
    size_t in_block = flag - (size_t)comm->rank * fa->count;
    for (int r = 0; r < comm->nranks; r++)
        if (buf[(size_t)r * fa->count + in_block]) return 0;
    return 1;
}

/* Copies the fused call's results to the calls' outputs. */
static void unpack_outputs(const struct braid_comm *comm, braid_group_item_t *items,
                           const braid_fuse_t *f, const char *buf)
{
    const braid_op_args_t *fa = &f->args;
    size_t block_bytes = fa->count * braid_dtype_size(fa->dtype);
    const char *mine =
        fa->coll == BRAID_COLL_REDUCE_SCATTER ? buf + (size_t)comm->rank * block_bytes : buf;
    size_t off = 0;
    for (int j = 0; j < f->k; j++) {
        braid_op_args_t *b = &items[f->idx[j]].args;
        size_t bytes = b->count * braid_dtype_size(b->dtype);
        if (fa->coll != BRAID_COLL_ALLGATHER) {
            if (bytes) memcpy(b->recvbuf, mine + off, bytes);
        } else {
            for (int r = 0; r < comm->nranks && bytes; r++)
                memcpy((char *)b->recvbuf + (size_t)r * bytes, buf + r * block_bytes + off, bytes);
        }
        off += bytes;
    }
}

/* A fused broadcast or reduce (see the top of the file): its inputs into buf (the root's
 * broadcast outputs written on the way); *late_p: on a reduce's root, the calls whose input is
 * read after the fused call instead (bit j: call j, packed as the op's identity). */
static void pack_rooted(const struct braid_comm *comm, const braid_group_item_t *items,
                        const braid_fuse_t *f, char *buf, uint64_t *late_p)
{
    int root = comm->rank == f->args.root, bcast = f->args.coll == BRAID_COLL_BROADCAST;
    size_t off = 0;
    *late_p = 0;
    for (int j = 0; j < f->k; j++) {
        const braid_op_args_t *b = &items[f->idx[j]].args;
        size_t es = braid_dtype_size(b->dtype), bytes = b->count * es;
        if (!bytes || (bcast && !root)) {
            /* nothing to send */
        } else if (bcast) { /* this input read after the earlier outputs are written */
            memcpy(buf + off, b->sendbuf, bytes);
            if (b->recvbuf != b->sendbuf) memcpy(b->recvbuf, buf + off, bytes);
        } else if (root && reads_earlier_output(comm, items, f, j)) {
            uint8_t id[8];
            dtype_identity(b->dtype, b->op, id);
            for (size_t e = 0; e < b->count; e++)
                memcpy(buf + off + e * es, id, es);
            *late_p |= 1ull << j;
        } else {
            memcpy(buf + off, b->sendbuf, bytes);
        }
        off += bytes;
    }
}

/* The fused broadcast's or reduce's results to the calls' outputs, in call order. */
static void unpack_rooted(const struct braid_comm *comm, braid_group_item_t *items,
                          const braid_fuse_t *f, const char *buf, uint64_t late)
{
    int root = comm->rank == f->args.root, bcast = f->args.coll == BRAID_COLL_BROADCAST;
    size_t off = 0;
    for (int j = 0; j < f->k; j++) {
        braid_op_args_t *b = &items[f->idx[j]].args;
        size_t bytes = b->count * braid_dtype_size(b->dtype);
        int writes = bcast ? !root : root; /* a broadcast's root wrote its outputs already */
        if (bytes && writes) {
            if (late >> j & 1) /* the others' inputs reduced, with its own as it is now */
                braid_reduce_pair(b->dtype, b->op, b->recvbuf, buf + off, b->sendbuf, b->count);
            else
                memcpy(b->recvbuf, buf + off, bytes);
        }
        off += bytes;
    }
}

braid_result_t braid_group_fuse_run(struct braid_comm *comm, braid_group_item_t *items,
                                    const braid_fuse_t *f, int *fell_back, char *msg, size_t msglen)
{
    *fell_back = 0;
    /* buf holds at most fuse_bytes + 64 bytes per rank (each block's flag and padding) */
    char *buf = comm->fuse_buf;
    size_t flag = 0;
    uint64_t late = 0;
    braid_op_args_t a = f->args;
    int is_rooted = rooted(a.coll);
    if (is_rooted) { /* a failed communicator: the call below fails at once, outputs untouched */
        if (!atomic_load(&comm->aborted) && !atomic_load(&comm->error))
            pack_rooted(comm, items, f, buf, &late);
    } else
        pack_inputs(comm, items, f, buf, !must_fall_back(comm, items, f), &flag);
    a.recvbuf = buf;
    a.sendbuf = buf;
    size_t block_bytes = a.count * braid_dtype_size(a.dtype);
    if (a.coll == BRAID_COLL_ALLGATHER) a.sendbuf = buf + (size_t)comm->rank * block_bytes;
    if (a.coll == BRAID_COLL_REDUCE_SCATTER) a.recvbuf = buf + (size_t)comm->rank * block_bytes;
    if (a.coll == BRAID_COLL_REDUCE && comm->rank != a.root) a.recvbuf = NULL;
    const char *name = braid_coll_name(a.coll);
    int c0 = items[f->idx[0]].call, c1 = items[f->idx[f->k - 1]].call;
    braid_clear_error();
    braid_result_t res = braid_coll_execute(comm, &a);
    if (res >= 0 && !is_rooted && !all_packed(comm, f, buf, flag)) {
        *fell_back = 1;
        braid_debug(COLL, "group calls %d-%d: a rank could not pack its inputs, run one by one", c0,
                    c1);
    } else if (res >= 0) {
        braid_debug(COLL, "group calls %d-%d: %d %ss fused (%zu %s)", c0, c1, f->k, name, f->total,
                    a.coll == BRAID_COLL_ALLGATHER   ? "bytes per rank"
                    : a.coll == BRAID_COLL_BROADCAST ? "bytes"
                                                     : "elements");
        if (late)
            braid_debug(COLL, "group calls %d-%d: %d inputs read after the fused call (root)", c0,
                        c1, __builtin_popcountll(late));
        if (is_rooted)
            unpack_rooted(comm, items, f, buf, late);
        else
            unpack_outputs(comm, items, f, buf);
    } else {
        snprintf(msg, msglen, "group calls %d-%d (%d %ss fused): %s", c0, c1, f->k, name,
                 braid_last_error());
    }
    if (res < 0) braid_set_error(res, "%s", msg);
    return res;
}
