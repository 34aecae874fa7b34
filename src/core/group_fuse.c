/* Small all-reduces of a group fused into one call (braid_group_end; see p2p.h).
 *
 * A group's collectives run in call order, each one a whole collective with its own latency:
 * eight all-reduces of 64 floats cost eight times one. Where consecutive collectives of a group
 * (its sends and receives, which run after them, left aside) are all-reduces of one dtype and
 * op, together at most BRAID_GROUP_FUSE_BYTES and each at most a quarter of that, they run as
 * one all-reduce of their inputs packed end to end (as NCCL's aggregated group launch and
 * Horovod's tensor fusion): one latency, and the packing copies, which are small by that bound.
 * Measured (eight calls per group, 64 KiB): 256 B-8 KiB calls took 0.4-0.8x the time without
 * fusion (0.2x with 4 ranks on 2 cpus or over tcp), 16 KiB ones 0.65-0.96x; 32 KiB ones fused
 * in pairs took up to 1.2x on 2 ranks (shared memory), hence the quarter (perf/RESULTS.md).
 *
 * Every rank must group alike, so the choice depends only on what matching calls agree on
 * (collective, count, dtype, op, and the limit, which every rank should set alike), never on
 * buffers. The fused call's descriptor carries the layout (braid_op_args_t.fused: the number
 * of calls and a hash of their counts, sent as the all-reduce's root), so ranks whose calls
 * differ but add up to the same count get BRAID_ERR_MISMATCH, not each other's elements.
 *
 * What only one rank knows: a call whose input is an earlier call's output in the same run
 * (call order matters there), or device buffers. Such a rank cannot pack its inputs, so the
 * fused call carries one more element, a flag: its identity value for the op from every rank
 * that could pack, another value (which the reduction keeps different from the identity) from
 * one that could not. If the reduced flag is not the identity anywhere, every rank sees it,
 * leaves its outputs untouched and runs the calls one by one as without fusion. */
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
    int64_t v;
    BRAID_CHECK(braid_param_int("GROUP_FUSE_BYTES", &v));
    if (v < 0 || v > (64 << 20))
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_GROUP_FUSE_BYTES=%lld is outside [0, 64 MiB]", (long long)v);
    int devices = 0; /* every rank's information is the same on every rank: they agree */
    for (int r = 0; r < comm->nranks; r++)
        devices += comm->peers[r].cuda_dev >= 0;
    comm->fuse_bytes = devices == comm->nranks || comm->nranks < 2 ? 0 : (size_t)v;
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

/* The flag's values: ok (the op's identity for 0 and 1) and not ok. Sum, max and average
 * reduce 0s to 0 and any 1 to a positive value (integer sums of 1s wrap only from 256 ranks
 * for 8-bit types, float8 averages underflow only beyond 512: such communicators do not fuse
 * 8-bit types); product and min reduce 1s to 1 and any 0 to 0. Integer averages round 1/n to
 * 0: not fused. */
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

/* Whether item it may be part of a fused run on a communicator of nranks ranks. */
static int fusable(const braid_group_item_t *it, size_t limit, int nranks)
{
    if (it->kind != BRAID_ITEM_COLL) return 0;
    const braid_op_args_t *a = &it->args;
    if (a->coll != BRAID_COLL_ALLREDUCE || a->premul || (unsigned)a->dtype >= BRAID_NUM_DTYPES)
        return 0;
    uint8_t ok[8], bad[8];
    if (!flag_values(a->dtype, a->op, nranks, ok, bad)) return 0;
    size_t es = braid_dtype_size(a->dtype);
    return a->count <= limit / 4 / es;
}

int braid_group_fuse_find(const struct braid_comm *comm, const braid_group_item_t *items, int n,
                          int from, braid_fuse_t *f)
{
    size_t limit = comm->fuse_bytes;
    f->k = 0;
    if (!limit || !fusable(&items[from], limit, comm->nranks)) return 0;
    const braid_op_args_t *first = &items[from].args;
    size_t es = braid_dtype_size(first->dtype), total = 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the counts */
    for (int i = from; i < n && f->k < BRAID_FUSE_MAX_CALLS; i++) {
        const braid_group_item_t *it = &items[i];
        if (it->kind == BRAID_ITEM_P2P) continue; /* they run after the collectives */
        if (it->fused || !fusable(it, limit, comm->nranks) || it->args.dtype != first->dtype ||
            it->args.op != first->op || (total + it->args.count) * es > limit)
            break;
        total += it->args.count;
        for (int b = 0; b < 8; b++) {
            h ^= (it->args.count >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
        f->idx[f->k++] = i;
    }
    if (f->k < 2) return f->k = 0;
    f->total = total;
    /* The flag, then zeros up to a multiple of a cache line per rank: an odd count split over
     * the ranks costs more than the bytes (tcp, 2 ranks, float32: 16385 elements 36 us, 16384
     * 30). */
    size_t unit = (64 / es) * (size_t)comm->nranks;
    f->args =
        (braid_op_args_t){.coll = BRAID_COLL_ALLREDUCE,
                          .count = (total + unit) / unit * unit,
                          .dtype = first->dtype,
                          .op = first->op,
                          .root = -1,
                          .fused = (int32_t)((((h ^ (h >> 32)) & 0xffffff) << 7) | (uint64_t)f->k)};
    return f->k;
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Whether this rank cannot pack the run's inputs before any output is written. */
static int must_fall_back(const braid_group_item_t *items, const braid_fuse_t *f, size_t es)
{
    for (int j = 0; j < f->k; j++) {
        const braid_op_args_t *b = &items[f->idx[j]].args;
        if (b->on_device) return 1;
        for (int i = 0; i < j; i++) {
            const braid_op_args_t *a = &items[f->idx[i]].args;
            if (overlaps(a->recvbuf, a->count * es, b->sendbuf, b->count * es)) return 1;
        }
    }
    return 0;
}

braid_result_t braid_group_fuse_run(struct braid_comm *comm, braid_group_item_t *items,
                                    const braid_fuse_t *f, int *fell_back, char *msg, size_t msglen)
{
    *fell_back = 0;
    const braid_op_args_t *a0 = &f->args;
    size_t es = braid_dtype_size(a0->dtype), bytes = a0->count * es;
    uint8_t ok[8], bad[8];
    flag_values(a0->dtype, a0->op, comm->nranks, ok, bad);
    char *buf = comm->fuse_buf; /* bytes <= fuse_bytes + 64 bytes per rank (the padding) */
    int pack = !must_fall_back(items, f, es);
    size_t off = 0;
    for (int j = 0; j < f->k; j++) {
        const braid_op_args_t *b = &items[f->idx[j]].args;
        if (pack && b->count) memcpy(buf + off, b->sendbuf, b->count * es);
        off += b->count * es;
    }
    if (!pack) memset(buf, 0, off); /* not used: every rank falls back */
    memcpy(buf + off, pack ? ok : bad, es);
    memset(buf + off + es, 0, bytes - off - es);
    braid_op_args_t a = *a0;
    a.sendbuf = a.recvbuf = buf;
    braid_clear_error();
    braid_result_t res = braid_coll_execute(comm, &a);
    if (res >= 0 && memcmp(buf + off, ok, es)) {
        *fell_back = 1;
        braid_debug(COLL, "group calls %d-%d: a rank could not pack its inputs, run one by one",
                    items[f->idx[0]].call, items[f->idx[f->k - 1]].call);
    } else if (res >= 0) {
        braid_debug(COLL, "group calls %d-%d: %d allreduces fused (%zu elements)",
                    items[f->idx[0]].call, items[f->idx[f->k - 1]].call, f->k, f->total);
        off = 0;
        for (int j = 0; j < f->k; j++) {
            braid_op_args_t *b = &items[f->idx[j]].args;
            if (b->count) memcpy(b->recvbuf, buf + off, b->count * es);
            off += b->count * es;
        }
    } else {
        snprintf(msg, msglen, "group calls %d-%d (%d allreduces fused): %s", items[f->idx[0]].call,
                 items[f->idx[f->k - 1]].call, f->k, braid_last_error());
    }
    if (res < 0) braid_set_error(res, "%s", msg);
    return res;
}
