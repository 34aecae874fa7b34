/* ompi_allreduce_perf: the all_reduce_perf loop (perf/bench.c) on MPI_Allreduce, so braid and
 * Open MPI can be compared with the same flags, output columns and --csv rows.
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader \
 *       build/bin/ompi_allreduce_perf -b 8 -e 256M -f 2 --csv ompi.csv
 *
 * Default float sum, like all_reduce_perf. MPI has no float16/bfloat16 or avg: those are skipped
 * with a note. In place is MPI_IN_PLACE; -m > 1 uses MPI_Iallreduce + MPI_Waitall. Built by
 * perf/peers/build.sh (mpicc); braid.h is included for its enums only, nothing links braid. */
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
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "rank %d: %s failed: %s\n", b->rank, call, msg);
    return -1;
}

static MPI_Datatype mpi_type(int dtype)
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

static int m_start(perf_backend_t *b, const perf_coll_t *coll, const void *send, void *recv,
                   size_t count, int dtype, int op, int root, int nonblocking)
{
    mpi_ctx_t *c = b->ctx;
    (void)coll;
    (void)root;
    if (count > (size_t)INT32_MAX) return mpi_fail(b, "MPI_Allreduce (count > INT_MAX)", 0);
    const void *s = send == recv ? MPI_IN_PLACE : send;
    int err;
    if (!nonblocking) {
        err = MPI_Allreduce(s, recv, (int)count, mpi_type(dtype), mpi_op(op), MPI_COMM_WORLD);
        return err == MPI_SUCCESS ? 0 : mpi_fail(b, "MPI_Allreduce", err);
    }
    if (c->nreqs == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        MPI_Request *r = realloc(c->reqs, (size_t)cap * sizeof(*r));
        if (!r) return mpi_fail(b, "realloc", 0);
        c->reqs = r;
        c->cap = cap;
    }
    err = MPI_Iallreduce(s, recv, (int)count, mpi_type(dtype), mpi_op(op), MPI_COMM_WORLD,
                         &c->reqs[c->nreqs]);
    if (err != MPI_SUCCESS) return mpi_fail(b, "MPI_Iallreduce", err);
    c->nreqs++;
    return 0;
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
    return coll->kind == PERF_ALLREDUCE && mpi_type(dtype) != MPI_DATATYPE_NULL &&
           mpi_op(op) != MPI_OP_NULL;
}

int main(int argc, char **argv)
{
    perf_opts_t opts;
    setlinebuf(stdout);
    int prc = perf_parse_args(argc, argv, &perf_coll_allreduce, &opts);
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
    snprintf(desc, sizeof(desc), "%s (MPI_Allreduce)", lib);
    b.device_desc = desc;

    int rc = perf_bench_run(&b, &perf_coll_allreduce, &opts);
    free(ctx.reqs);
    if (rc == 2) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Finalize();
    return rc;
}
