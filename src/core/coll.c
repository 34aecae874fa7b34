/* Public collective entry points: argument checks, then the engine on the caller's thread, or
 * through the worker queue for the braid_i* forms (and for blocking calls issued while
 * non-blocking ones are pending, so operations on a communicator stay in call order). */
#include "algos/algo.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/timeline.h"
#include "core/p2p.h"
#include "core/redop.h"
#include "core/worker.h"
#include "cuda/cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dtype_names[BRAID_NUM_DTYPES] = {
    "int8",    "uint8",    "int32",   "uint32",  "int64",       "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2"};
static const size_t dtype_sizes[BRAID_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
static const char *op_names[BRAID_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};

const char *braid_dtype_name(braid_datatype_t dtype)
{
    return (unsigned)dtype < BRAID_NUM_DTYPES ? dtype_names[dtype] : "invalid";
}

const char *braid_op_name(braid_redop_t op)
{
    if ((unsigned)op < BRAID_NUM_OPS) return op_names[op];
    return (int)op >= (1 << 12) + (int)BRAID_NUM_OPS ? "premulsum" : "invalid"; /* created ops */
}

size_t braid_dtype_size(braid_datatype_t dtype)
{
    return (unsigned)dtype < BRAID_NUM_DTYPES ? dtype_sizes[dtype] : 0;
}

static void timeline_call(struct braid_comm *comm, const braid_op_args_t *a, uint32_t seq,
                          uint64_t t0)
{
    int rooted = a->coll == BRAID_COLL_BROADCAST || a->coll == BRAID_COLL_REDUCE;
    int reduces = a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
                  a->coll == BRAID_COLL_REDUCE_SCATTER;
    size_t count =
        a->coll == BRAID_COLL_REDUCE_SCATTER ? a->count * (size_t)comm->nranks : a->count;
    braid_tl_event_t ev = {.name = braid_coll_name(a->coll),
                           .kind = BRAID_TL_CALL,
                           .t0 = t0,
                           .t1 = braid_now_ns(),
                           .seq = seq,
                           .count = count,
                           .bytes = count * braid_dtype_size(a->dtype),
                           .dtype = a->coll == BRAID_COLL_BARRIER ? -1 : (int16_t)a->dtype,
                           .op = !reduces    ? -1
                                 : a->premul ? BRAID_NUM_OPS
                                             : (int16_t)a->op,
                           .algo = (int16_t)comm->tl_algo,
                           .root = rooted ? a->root : -1,
                           .send_peer = -1,
                           .recv_peer = -1};
    braid_timeline_add(comm, &ev);
}

static _Thread_local int coll_depth; /* braid_coll_execute calls this thread is inside */

int braid_coll_running(void)
{
    return coll_depth;
}

static braid_result_t coll_execute(struct braid_comm *comm, const braid_op_args_t *a);

braid_result_t braid_coll_execute(struct braid_comm *comm, const braid_op_args_t *a)
{
    coll_depth++;
    braid_result_t res = coll_execute(comm, a);
    coll_depth--;
    return res;
}

static braid_result_t coll_execute(struct braid_comm *comm, const braid_op_args_t *a)
{
    if (a->on_device) return braid_cuda_run_blocking(comm, a); /* comes back here, on host */
    uint32_t seq = ++comm->seq;
    braid_msg_hdr_t desc = braid_engine_desc(a, seq);
    braid_engine_record(comm, &desc);
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "%s #%u: %s", braid_coll_name(a->coll), seq,
                               braid_comm_abort_reason(comm));
    int err = atomic_load(&comm->error);
    if (err) return braid_set_error(err, "communicator failed earlier: %s", comm->errmsg);
    braid_result_t res;
    uint64_t tl0 = 0;
    if (braid_timeline_enabled()) {
        tl0 = braid_now_ns();
        comm->tl_algo = -1;
    }
    if (a->coll == BRAID_COLL_BARRIER) {
        /* One byte per rank of scratch, reduced with max. */
        uint8_t *scratch = calloc((size_t)comm->nranks, 1);
        if (!scratch) return braid_set_error(BRAID_ERR_NOMEM, "barrier: out of memory");
        braid_op_args_t b = *a;
        b.sendbuf = b.recvbuf = scratch;
        b.count = (size_t)comm->nranks;
        res = braid_engine_run(comm, &b, seq);
        free(scratch);
    } else if (a->count == 0) {
        res = braid_engine_run(comm, a, seq); /* the descriptor exchange only */
    } else if (a->premul || braid_redop_avg_premul(a)) {
        res = braid_redop_premul_execute(comm, a, seq); /* scale, then the sum collective */
    } else {
        res = braid_algo_execute(comm, a, seq); /* the ring engine, or another algorithm */
    }
    if (tl0) timeline_call(comm, a, seq, tl0);
    if (res < 0) braid_comm_fail_call(comm, res);
    return res;
}

/* A call's descriptor in words, for mismatch messages (engine.h). */
void braid_engine_describe(char *buf, size_t len, const braid_msg_hdr_t *h)
{
    char dt[16], op[24] = "", root[40] = "";
    if (braid_dtype_size(h->dtype))
        snprintf(dt, sizeof(dt), "%s", braid_dtype_name(h->dtype));
    else
        snprintf(dt, sizeof(dt), "dtype %u", h->dtype);
    int reduces = h->coll == BRAID_COLL_ALLREDUCE || h->coll == BRAID_COLL_REDUCE ||
                  h->coll == BRAID_COLL_REDUCE_SCATTER;
    if (reduces && (unsigned)h->op <= BRAID_OP_WIRE_PREMULSUM)
        snprintf(op, sizeof(op), ", %s", braid_redop_wire_name(h->op));
    else if (reduces)
        snprintf(op, sizeof(op), ", op %u", h->op);
    if (h->root >= 0 || (h->coll == BRAID_COLL_BROADCAST || h->coll == BRAID_COLL_REDUCE))
        snprintf(root, sizeof(root), ", root %d", h->root);
    uint64_t count = h->count;
    char fused[48] = "";
    unsigned layout = (unsigned)(count >> 32) & 0x7fffffff;
    /* a fused group run (braid_engine_desc), not a rejected call's unchecked count */
    if ((count & BRAID_DESC_FUSED) && (layout & 0x7f) >= 2 &&
        (layout & 0x7f) <= BRAID_FUSE_MAX_CALLS) {
        snprintf(fused, sizeof(fused), ", %u calls fused, layout %06x", layout & 0x7f, layout >> 7);
        count &= 0xffffffffu;
    }
    snprintf(buf, len, "%s #%u (count %llu, %s%s%s%s)", braid_coll_name(h->coll), h->seq,
             (unsigned long long)count, dt, op, root, fused);
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Checks everything a collective's arguments can get wrong; the message names the argument. */
static braid_result_t validate(struct braid_comm *comm, braid_op_args_t *a)
{
    const char *name = braid_coll_name(a->coll);
    if ((unsigned)a->dtype >= BRAID_NUM_DTYPES)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: dtype=%d is not a braid_datatype_t",
                               name, (int)a->dtype);
    int reduces = a->coll == BRAID_COLL_ALLREDUCE || a->coll == BRAID_COLL_REDUCE ||
                  a->coll == BRAID_COLL_REDUCE_SCATTER;
    if (reduces) BRAID_CHECK(braid_redop_resolve(comm, a, name)); /* created ops */
    int rooted = a->coll == BRAID_COLL_BROADCAST || a->coll == BRAID_COLL_REDUCE;
    if (rooted && (a->root < 0 || a->root >= comm->nranks))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: root=%d is outside [0, nranks=%d)", name,
                               a->root, comm->nranks);
    size_t es = braid_dtype_size(a->dtype);
    size_t n = (size_t)comm->nranks;
    int per_rank = a->coll == BRAID_COLL_REDUCE_SCATTER || a->coll == BRAID_COLL_ALLGATHER;
    if (a->count > (SIZE_MAX / 2) / es / (per_rank ? n : 1) || a->count > (UINT64_MAX >> 8))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: count=%zu overflows the byte size", name,
                               a->count);
    if (a->count == 0) return BRAID_SUCCESS;
    size_t bytes = a->count * es, big = per_rank ? bytes * n : bytes;
    size_t in_bytes = a->coll == BRAID_COLL_REDUCE_SCATTER ? big : bytes;
    size_t out_bytes = a->coll == BRAID_COLL_ALLGATHER ? big : bytes;
    int root = rooted && comm->rank == a->root;
    int needs_send = a->coll == BRAID_COLL_BROADCAST ? root : 1;
    int needs_recv = a->coll == BRAID_COLL_REDUCE ? root : 1;
    if (needs_send && !a->sendbuf)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: sendbuf is NULL with count=%zu", name,
                               a->count);
    if (needs_recv && !a->recvbuf)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: recvbuf is NULL with count=%zu", name,
                               a->count);
    if (needs_send && needs_recv && a->sendbuf != a->recvbuf &&
        overlaps(a->sendbuf, in_bytes, a->recvbuf, out_bytes)) {
        /* In place for reduce-scatter / allgather is the rank's own slot. */
        const char *slot = NULL;
        if (a->coll == BRAID_COLL_REDUCE_SCATTER)
            slot = (const char *)a->sendbuf + (size_t)comm->rank * bytes;
        if (a->coll == BRAID_COLL_ALLGATHER)
            slot = (const char *)a->recvbuf + (size_t)comm->rank * bytes;
        int in_place =
            slot && (a->coll == BRAID_COLL_REDUCE_SCATTER ? slot == (const char *)a->recvbuf
                                                          : slot == (const char *)a->sendbuf);
        if (!in_place)
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "%s: sendbuf and recvbuf overlap without being in place", name);
    }
    return braid_coll_check_device(comm, a, needs_send && a->sendbuf, needs_recv && a->recvbuf);
}

braid_result_t braid_coll_validate(struct braid_comm *comm, braid_op_args_t *a)
{
    return validate(comm, a);
}

/* A call that validation refused (res, with its message) on a communicator of several ranks
 * takes its sequence number anyway and tells its peers (exchange: braid_engine_reject for the
 * ring's collectives, braid_pcoll_reject_exchange for those of coll_p2p.c), so the peers'
 * call of that number fails naming it instead of pairing with this rank's next call. When
 * every rank refused its call of that number, nothing ran and the communicator stays usable;
 * else the communicator fails (sticky error, peers told, as for any mismatch) and the caller
 * still gets the validation error. desc describes the call (its seq is set here). */
braid_result_t braid_call_reject(struct braid_comm *comm, braid_msg_hdr_t desc, braid_result_t res,
                                 braid_reject_fn exchange, const void *arg)
{
    char reason[1024];
    snprintf(reason, sizeof(reason), "%s", braid_last_error());
    if (comm->nranks < 2 || atomic_load(&comm->aborted) || atomic_load(&comm->error)) return res;
    /* In call order: after the operations queued before it. */
    while (braid_worker_pending(comm)) {
        if (atomic_load(&comm->aborted)) return braid_set_error(res, "%s", reason);
        usleep(100);
    }
    uint32_t seq = ++comm->seq;
    desc.seq = seq;
    desc.flags = BRAID_MSG_REJECTED;
    braid_engine_record(comm, &desc);
    braid_result_t r = exchange(comm, &desc, reason, arg);
    if (r < 0) {
        char why[1024];
        snprintf(why, sizeof(why), "rank %d: %s", comm->rank, braid_last_error());
        braid_comm_set_error(comm, r, "%s", braid_last_error());
        braid_comm_fail_peers(comm, r, why);
        return braid_set_error(res, "%s (and the peers' call #%u did not match: %s)", reason, seq,
                               comm->errmsg);
    }
    return braid_set_error(res, "%s", reason);
}

static braid_result_t engine_reject(struct braid_comm *comm, const braid_msg_hdr_t *desc,
                                    const char *reason, const void *arg)
{
    return braid_engine_reject(comm, arg, desc->seq, reason);
}

braid_result_t braid_coll_reject(struct braid_comm *comm, const braid_op_args_t *a,
                                 braid_result_t res)
{
    return braid_call_reject(comm, braid_engine_desc(a, 0), res, engine_reject, a);
}

static braid_result_t submit(struct braid_comm *comm, const braid_op_args_t *a,
                             braid_request_t *req_p);

static braid_result_t queue_or_run(struct braid_comm *comm, const braid_op_args_t *args, int nb,
                                   braid_request_t *req_p)
{
    braid_op_args_t v = *args; /* the checks set v.on_device and resolve a created op */
    const braid_op_args_t *a = &v;
    braid_result_t vres = nb && !req_p ? braid_set_error(BRAID_ERR_INVALID_ARG, "%s: req_p is NULL",
                                                         braid_coll_name(a->coll))
                                       : validate(comm, &v);
    /* Device buffers are read after the device work issued before the call (braid_dev_ready),
     * waited for here, on the caller's thread: never on the worker, which may have to release
     * a stream the legacy stream waits for. */
    if (vres >= 0 && v.on_device) vres = braid_dev_ready(comm);
    /* Device calls the worker will run: what allocates is done here first (stage.c); in a
     * group, at braid_group_end (also on the caller's thread). */
    if (vres >= 0 && v.on_device && braid_group_depth() == 0 &&
        (req_p || braid_worker_pending(comm)))
        vres = braid_coll_prepare_dev(comm, &v);
    if (braid_group_depth() > 0) { /* deferred to braid_group_end; nothing runs on an error */
        braid_group_note(vres, braid_coll_name(a->coll));
        if (vres < 0) { /* kept so that group end can tell the peers */
            braid_group_item_t it = {.kind = BRAID_ITEM_COLL, .args = v};
            return braid_group_add_rejected(comm, &it, vres);
        }
        return braid_group_add_coll(comm, &v, req_p);
    }
    if (vres < 0) return braid_coll_reject(comm, a, vres);
    return submit(comm, a, req_p);
}

braid_result_t braid_coll_submit(struct braid_comm *comm, const braid_op_args_t *a)
{
    return submit(comm, a, NULL);
}

/* Runs validated arguments: on the caller's thread, or queued behind pending operations. */
static braid_result_t submit(struct braid_comm *comm, const braid_op_args_t *a,
                             braid_request_t *req_p)
{
    if (!req_p && !braid_worker_pending(comm)) return braid_coll_execute(comm, a);
    struct braid_request *req = calloc(1, sizeof(*req));
    if (!req) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for a request");
    req->args = *a;
    req->comm = comm;
    braid_result_t res = braid_worker_submit(comm, req);
    if (res < 0) {
        free(req);
        return res;
    }
    if (req_p) {
        *req_p = req;
        return BRAID_SUCCESS;
    }
    return braid_wait(req);
}

/* Every collective entry: the communicator is entered (destroy waits for the call to leave)
 * by one thread at a time (braid_comm_enter_call). */
static braid_result_t run_or_queue(struct braid_comm *comm, const braid_op_args_t *a, int nb,
                                   braid_request_t *req_p)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, braid_coll_name(a->coll)));
    braid_result_t res = queue_or_run(comm, a, nb, req_p);
    braid_comm_leave_call(comm);
    return res;
}

#define ARGS(c, s, r, n, d, o, rt)                                                                 \
    (braid_op_args_t)                                                                              \
    {                                                                                              \
        .coll = (c), .sendbuf = (s), .recvbuf = (r), .count = (n), .dtype = (d), .op = (o),        \
        .root = (rt)                                                                               \
    }

braid_result_t braid_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm,
                                braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1);
    return run_or_queue(comm, &a, 0, NULL);
}

braid_result_t braid_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                braid_datatype_t dtype, int root, braid_comm_t comm,
                                braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, 0, root);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                               braid_datatype_t dtype, int root, braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, 0, root);
    return run_or_queue(comm, &a, 0, NULL);
}

braid_result_t braid_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                             braid_datatype_t dtype, braid_redop_t op, int root, braid_comm_t comm,
                             braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_reduce(const void *sendbuf, void *recvbuf, size_t count,
                            braid_datatype_t dtype, braid_redop_t op, int root, braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root);
    return run_or_queue(comm, &a, 0, NULL);
}

braid_result_t braid_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm,
                                     braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, -1);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    braid_datatype_t dtype, braid_redop_t op, braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, -1);
    return run_or_queue(comm, &a, 0, NULL);
}

braid_result_t braid_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                braid_datatype_t dtype, braid_comm_t comm, braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, 0, -1);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               braid_datatype_t dtype, braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, 0, -1);
    return run_or_queue(comm, &a, 0, NULL);
}

/* A barrier is an all-reduce of one byte per rank (every rank's final value depends on every
 * rank having entered); sendbuf/recvbuf NULL tell the engine to use scratch space. */
braid_result_t braid_ibarrier(braid_comm_t comm, braid_request_t *req_p)
{
    braid_op_args_t a = ARGS(BRAID_COLL_BARRIER, NULL, NULL, 0, BRAID_UINT8, BRAID_MAX, -1);
    return run_or_queue(comm, &a, 1, req_p);
}

braid_result_t braid_barrier(braid_comm_t comm)
{
    braid_op_args_t a = ARGS(BRAID_COLL_BARRIER, NULL, NULL, 0, BRAID_UINT8, BRAID_MAX, -1);
    return run_or_queue(comm, &a, 0, NULL);
}
