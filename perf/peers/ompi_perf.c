/* ompi_allreduce_perf / ompi_alltoall_perf / ompi_sendrecv_perf: the all_reduce_perf,
 * alltoall_perf and sendrecv_perf loops (perf/bench.c) on MPI_Allreduce, MPI_Alltoall and
 * MPI_Sendrecv, so braid and Open MPI are compared with the same flags, output columns, checks
 * and --csv rows. One source, built three times by perf/peers/build.sh (the collective is chosen
 * by the program's name):
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader \
 *       build/bin/ompi_allreduce_perf -b 8 -e 256M -f 2 --csv ompi.csv
 *
 * allreduce: default float sum, like all_reduce_perf; MPI has no float16/bfloat16 arithmetic or
 * avg: those are skipped with a note; in place is MPI_IN_PLACE. sendrecv: MPI_Sendrecv to rank+1
 * from rank-1 (in place: MPI_Sendrecv_replace), as nccl-tests' grouped ncclSend/ncclRecv;
 * alltoall: MPI_Alltoall (in place: MPI_IN_PLACE); there float16/bfloat16 move as 2-byte integers
 * (no arithmetic is involved). -m > 1 uses the nonblocking calls and MPI_Waitall. braid.h is
 * included for its enums only, nothing links braid. */
#include "../common.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Request *reqs;
    int nreqs, cap;
} mpi_ctx_t;

static int mpi_fail(perf_backend_t *b, const char *call, int err)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (err) MPI_Error_string(err, msg, &len);
    fprintf(stderr, "rank %d: %s failed: %s\n", b->rank, call, msg);
    return -1;
}

/* The MPI type of dtype; 2-byte floats only where nothing is computed (moved). */
static MPI_Datatype mpi_type(int dtype, int moved)
{
    switch (dtype) {
    case BRAID_INT8:
        return MPI_INT8_T;
    case BRAID_UINT8:
        return MPI_UINT8_T;
    case BRAID_INT32:
        return MPI_INT32_T;
    case BRAID_UINT32:
        return MPI_UINT32_T;
    case BRAID_INT64:
        return MPI_INT64_T;
    case BRAID_UINT64:
        return MPI_UINT64_T;
    case BRAID_FLOAT16:
    case BRAID_BFLOAT16:
        return moved ? MPI_UINT16_T : MPI_DATATYPE_NULL;
    case BRAID_FLOAT32:
        return MPI_FLOAT;
    case BRAID_FLOAT64:
        return MPI_DOUBLE;
    default:
        return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(int op)
{
    switch (op) {
    case BRAID_SUM:
        return MPI_SUM;
    case BRAID_PROD:
        return MPI_PROD;
    case BRAID_MIN:
        return MPI_MIN;
    case BRAID_MAX:
        return MPI_MAX;
    default:
        return MPI_OP_NULL;
    }
}

static MPI_Request *new_req(perf_backend_t *b)
{
    mpi_ctx_t *c = b->ctx;
    if (c->nreqs == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        MPI_Request *r = realloc(c->reqs, (size_t)cap * sizeof(*r));
        if (!r) return NULL;
        c->reqs = r;
        c->cap = cap;
    }
    return &c->reqs[c->nreqs++];
}

static int sendrecv(perf_backend_t *b, const void *send, void *recv, int n, MPI_Datatype t,
                    int nonblocking)
{
    int err, next = (b->rank + 1) % b->nranks, prev = (b->rank + b->nranks - 1) % b->nranks;
    if (!nonblocking) {
        if (send == recv)
            err = MPI_Sendrecv_replace(recv, n, t, next, 0, prev, 0, MPI_COMM_WORLD,
                                       MPI_STATUS_IGNORE);
        else
            err = MPI_Sendrecv(send, n, t, next, 0, recv, n, t, prev, 0, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE);
        return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Sendrecv", err);
    }
    MPI_Request *rr = new_req(b), *rs = rr ? new_req(b) : NULL;
    if (!rs) return mpi_fail(b, "realloc", 0);
    err = MPI_Irecv(recv, n, t, prev, 0, MPI_COMM_WORLD, rr);
    if (err == MPI_SUCCESS) err = MPI_Isend(send, n, t, next, 0, MPI_COMM_WORLD, rs);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Isend/Irecv", err);
}

static int m_start(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                   size_t count, int dtype, int op, int root, int nonblocking)
{
    (void)root;
    if (count > (size_t)INT32_MAX) return mpi_fail(b, "count > INT_MAX", 0);
    int n = (int)count, err;
    MPI_Datatype t = mpi_type(dtype, coll->kind != PERF_ALLREDUCE);
    const void *s = send == recv ? MPI_IN_PLACE : send;
    if (coll->kind == PERF_SENDRECV) return sendrecv(b, send, recv, n, t, nonblocking);
    MPI_Request *r = nonblocking ? new_req(b) : NULL;
    if (nonblocking && !r) return mpi_fail(b, "realloc", 0);
    if (coll->kind == PERF_ALLTOALL) {
        err = r ? MPI_Ialltoall(s, n, t, recv, n, t, MPI_COMM_WORLD, r)
                : MPI_Alltoall(s, n, t, recv, n, t, MPI_COMM_WORLD);
        return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Alltoall", err);
    }
    err = r ? MPI_Iallreduce(s, recv, n, t, mpi_op(op), MPI_COMM_WORLD, r)
            : MPI_Allreduce(s, recv, n, t, mpi_op(op), MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Allreduce", err);
}

static int m_complete(perf_backend_t *b)
{
    mpi_ctx_t *c = b->ctx;
    int err = c->nreqs ? MPI_Waitall(c->nreqs, c->reqs, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
    c->nreqs = 0;
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Waitall", err);
}

static int m_barrier(perf_backend_t *b)
{
    int err = MPI_Barrier(MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Barrier", err);
}

static int m_allreduce_f64(perf_backend_t *b, double *v, int op)
{
    int err = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Allreduce(double)", err);
}

static int m_allreduce_i64(perf_backend_t *b, int64_t *v)
{
    int err = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Allreduce(int64)", err);
}

static int m_allgather_bytes(perf_backend_t *b, const void *mine, void *all, size_t len)
{
    int err = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Allgather", err);
}

static int m_supports(perf_backend_t *b, const perf_coll_t *coll, int dtype, int op)
{
    (void)b;
    if (coll->kind == PERF_ALLREDUCE)
        return mpi_type(dtype, 0) != MPI_DATATYPE_NULL && mpi_op(op) != MPI_OP_NULL;
    return (coll->kind == PERF_ALLTOALL || coll->kind == PERF_SENDRECV) &&
           mpi_type(dtype, 1) != MPI_DATATYPE_NULL;
}

int main(int argc, char **argv)
{
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const perf_coll_t *coll = strstr(prog, "alltoall")   ? &perf_coll_alltoall
                              : strstr(prog, "sendrecv") ? &perf_coll_sendrecv
                                                         : &perf_coll_allreduce;
    const char *call = coll->kind == PERF_ALLTOALL   ? "MPI_Alltoall"
                       : coll->kind == PERF_SENDRECV ? "MPI_Sendrecv"
                                                     : "MPI_Allreduce";
    perf_opts_t opts;
    setlinebuf(stdout);
    int prc = perf_parse_args(argc, argv, coll, &opts);
    if (prc) return prc > 0 ? 0 : 2;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_ctx_t ctx = {0};
    perf_backend_t b = {
        .name = "ompi",
        .ctx = &ctx,
        .start = m_start,
        .complete = m_complete,
        .barrier = m_barrier,
        .allreduce_f64 = m_allreduce_f64,
        .allreduce_i64 = m_allreduce_i64,
        .allgather_bytes = m_allgather_bytes,
        .supports = m_supports,
    };
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);

    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "", desc[160];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = '\0'; /* "Open MPI v4.1.4" */
    snprintf(desc, sizeof(desc), "%s (%s)", lib, call);
    b.device_desc = desc;

    int rc = perf_bench_run(&b, coll, &opts);
    free(ctx.reqs);
    if (rc == 2) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Finalize();
    return rc;
}
