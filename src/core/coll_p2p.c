/* Entry points of the collectives that run on the send/recv connections: alltoall(v), gather,
 * scatter, allgatherv, reduce_scatterv (plans in algos/p2p_plan.c, runner in p2p.c). Each
 * takes a sequence number on the communicator like every collective, and its messages carry
 * it, so a rank that calls another collective is BRAID_ERR_MISMATCH naming both calls. The
 * count and displacement arrays are copied at the call (the i-forms may free them at once). */
#include "core/log.h"
#include "core/p2p.h"
#include "core/worker.h"

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
    braid_pcoll_t p = *pc;
    void *tmp = NULL;
    /* alltoall(v) in place: the input is read from a copy. */
    if ((pc->coll == BRAID_COLL_ALLTOALL || pc->coll == BRAID_COLL_ALLTOALLV) && pc->sendbuf &&
        pc->sendbuf == pc->recvbuf) {
        size_t elems = pc->coll == BRAID_COLL_ALLTOALL ? pc->count * (size_t)n
                                                       : extent(pc->sendcounts, pc->sdispls, n);
        if (elems) {
            tmp = malloc(elems * es);
            if (!tmp)
                return braid_set_error(BRAID_ERR_NOMEM, "%s #%u: out of memory for %zu elements",
                                       name, seq, elems);
            memcpy(tmp, pc->sendbuf, elems * es);
            p.sendbuf = tmp;
        }
    }
    braid_p2p_batch_t b = {0};
    braid_result_t res = braid_pcoll_plan(&p, n, comm->rank, seq, &b);
    for (int i = 0; i < b.nops; i++)
        b.ops[i].call = call;
    if (res >= 0) res = braid_p2p_run(comm, &b, NULL, NULL, NULL);
    braid_p2p_batch_free(&b);
    free(tmp);
    if (res < 0) {
        char why[600];
        snprintf(why, sizeof(why), "rank %d: %s", comm->rank, braid_last_error());
        braid_comm_set_error(comm, res, "%s", braid_last_error());
        braid_comm_fail_peers(comm, res, why);
    }
    return res;
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

#define ARG_ERR(...) braid_set_error(BRAID_ERR_INVALID_ARG, __VA_ARGS__)

/* Checks one call's arguments; the message names the argument. */
static braid_result_t validate(struct braid_comm *comm, const braid_pcoll_t *pc)
{
    const char *name = braid_coll_name(pc->coll);
    int n = comm->nranks, me = comm->rank;
    if ((unsigned)pc->dtype >= BRAID_NUM_DTYPES)
        return ARG_ERR("%s: dtype=%d is not a braid_datatype_t", name, (int)pc->dtype);
    if (pc->coll == BRAID_COLL_REDUCE_SCATTERV && (unsigned)pc->op >= BRAID_NUM_OPS)
        return ARG_ERR("%s: op=%d is not a braid_redop_t", name, (int)pc->op);
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
    /* The bytes each buffer spans on this rank (0: not used). */
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
        if (pc->count != pc->recvcounts[me])
            return ARG_ERR("%s: sendcount=%zu differs from recvcounts[%d]=%zu", name, pc->count, me,
                           pc->recvcounts[me]);
        in = pc->count;
        out = extent(pc->recvcounts, pc->rdispls, n);
        break;
    case BRAID_COLL_REDUCE_SCATTERV:
        for (int i = 0; i < n; i++)
            in += pc->recvcounts[i];
        out = pc->recvcounts[me];
        break;
    }
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

static braid_result_t pcoll_call_in(braid_pcoll_t pc, braid_comm_t comm, int iform,
                                    braid_request_t *req_p)
{
    const char *name = braid_coll_name(pc.coll);
    braid_result_t res = BRAID_SUCCESS;
    if (iform && !req_p) res = ARG_ERR("%s: req_p is NULL", name);
    if (res >= 0) res = validate(comm, &pc);
    if (res >= 0) res = check_same_buffer(comm, &pc);
    if (braid_group_depth() > 0) braid_group_note(res, name);
    if (res < 0) return res;
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
