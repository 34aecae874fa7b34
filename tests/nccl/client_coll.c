/* The NCCL client's collectives: every datatype x reduction op x count (0, 1, odd, beyond one
 * pipelined chunk) through all-reduce, reduce, reduce-scatter, broadcast, bcast and all-gather,
 * in place and out of place, with misaligned buffers for odd counts (test_coll); and PreMulSum
 * ops: every datatype, ops destroyed inside their group, ops of another communicator, and a
 * communicator aborted under an open group (test_premulsum). */
#define _GNU_SOURCE
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- coll ---------------------------------------------------------------------------------- */
/* Returns 1 when dt is unsupported and that is allowed (float8 before braid has it). */
static int dtype_skipped(ncclResult_t r, ncclDataType_t dt, int *fail)
{
    *fail = 0;
    if (r != ncclInvalidUsage || (dt != ncclFloat8e4m3 && dt != ncclFloat8e5m2)) return 0;
    if (require_fp8 || !strstr(ncclGetLastError(NULL), "not supported")) {
        *fail = 1;
        return 0;
    }
    return 1;
}

static int coll_one(ncclComm_t world, ncclDataType_t dt, ncclRedOp_t op, size_t count, int seed,
                    int *skipped)
{
    int n = g_nranks;
    size_t sz = dt_size(dt), off = (count % 2) * sz; /* odd counts: buffers off by one element */
    char *sb = malloc((size_t)n * count * sz + 2 * sz + 1),
         *rb = malloc((size_t)n * count * sz + 2 * sz + 1);
    CHECK(sb && rb, "malloc");
    char *s = sb + off, *r = rb + off;
    char label[96];
    int fail;
    /* all-reduce, out of place or (even seeds) in place */
    int inplace = seed % 2 == 0;
    fill(s, dt, op, g_rank, n, 0, count, seed);
    ncclResult_t res = ncclAllReduce(s, inplace ? s : r, count, dt, op, world, NULL);
    if (dtype_skipped(res, dt, &fail)) {
        *skipped = 1;
        free(sb);
        free(rb);
        return 0;
    }
    CHECK(!fail && res == ncclSuccess, "allreduce %s %s: %d %s", dt_name(dt), op_name(op), res,
          ncclGetLastError(world));
    snprintf(label, sizeof(label), "allreduce %s %s count %zu%s", dt_name(dt), op_name(op), count,
             inplace ? " in place" : "");
    CHECK(!check_reduced(inplace ? s : r, dt, op, n, 0, count, seed, 0, label), "%s", label);
    /* reduce to a root that moves with the seed */
    int root = seed % n;
    fill(s, dt, op, g_rank, n, 0, count, seed + 1);
    memset(r, 0x5a, count * sz);
    NCCLOK(ncclReduce(s, g_rank == root ? r : NULL, count, dt, op, root, world, NULL));
    snprintf(label, sizeof(label), "reduce %s %s count %zu root %d", dt_name(dt), op_name(op),
             count, root);
    if (g_rank == root)
        CHECK(!check_reduced(r, dt, op, n, 0, count, seed + 1, 0, label), "%s", label);
    /* reduce-scatter: count per rank; in place on even seeds */
    fill(s, dt, op, g_rank, n, 0, count * (size_t)n, seed + 2);
    char *out = inplace ? s + (size_t)g_rank * count * sz : r;
    NCCLOK(ncclReduceScatter(s, out, count, dt, op, world, NULL));
    snprintf(label, sizeof(label), "reduce_scatter %s %s count %zu%s", dt_name(dt), op_name(op),
             count, inplace ? " in place" : "");
    CHECK(!check_reduced(out, dt, op, n, (size_t)g_rank * count, count, seed + 2, 0, label), "%s",
          label);
    free(sb);
    free(rb);
    return 0;
}

static int copy_one(ncclComm_t world, ncclDataType_t dt, size_t count, int seed)
{
    int n = g_nranks;
    size_t sz = dt_size(dt);
    char *s = malloc((size_t)n * count * sz + 1), *r = malloc((size_t)n * count * sz + 1);
    CHECK(s && r, "malloc");
    char label[96];
    int root = (seed + 1) % n;
    fill(s, dt, ncclSum, g_rank, n, 0, count, seed);
    memset(r, 0x33, count * sz);
    NCCLOK(ncclBroadcast(s, r, count, dt, root, world, NULL));
    snprintf(label, sizeof(label), "broadcast %s count %zu root %d", dt_name(dt), count, root);
    CHECK(!check_rank(r, dt, ncclSum, root, n, 0, count, seed, label), "%s", label);
    fill(s, dt, ncclSum, g_rank, n, 0, count, seed + 1);
    NCCLOK(ncclBcast(s, count, dt, root, world, NULL));
    snprintf(label, sizeof(label), "bcast %s count %zu root %d", dt_name(dt), count, root);
    CHECK(!check_rank(s, dt, ncclSum, root, n, 0, count, seed + 1, label), "%s", label);
    /* all-gather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        char *mine = inplace ? r + (size_t)g_rank * count * sz : s;
        fill(mine, dt, ncclSum, g_rank, n, 0, count, seed + 2 + inplace);
        NCCLOK(ncclAllGather(mine, r, count, dt, world, NULL));
        for (int p = 0; p < n; p++) {
            snprintf(label, sizeof(label), "allgather %s count %zu block %d%s", dt_name(dt), count,
                     p, inplace ? " in place" : "");
            CHECK(!check_rank(r + (size_t)p * count * sz, dt, ncclSum, p, n, 0, count,
                              seed + 2 + inplace, label),
                  "%s", label);
        }
    }
    free(s);
    free(r);
    return 0;
}

int test_coll(ncclComm_t world)
{
    static const size_t counts[] = {0, 1, 7, 1031, 4099};
    int nskip = 0, seed = 1;
    for (int dt = 0; dt < ncclNumTypes; dt++) {
        int skipped = 0;
        for (int op = 0; op < ncclNumOps && !skipped; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && !skipped; c++)
                if (coll_one(world, (ncclDataType_t)dt, (ncclRedOp_t)op, counts[c], seed++,
                             &skipped))
                    return 1;
        if (skipped) {
            nskip++;
            printf("rank %d: coll: %s skipped: %s\n", g_rank, dt_name((ncclDataType_t)dt),
                   ncclGetLastError(NULL));
            continue;
        }
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            if (copy_one(world, (ncclDataType_t)dt, counts[c], seed++)) return 1;
    }
    /* Sizes beyond one pipelined chunk. */
    if (coll_one(world, ncclFloat32, ncclSum, 300007, 1000, &nskip)) return 1;
    if (coll_one(world, ncclInt8, ncclMax, (1 << 20) + 3, 1001, &nskip)) return 1;
    if (copy_one(world, ncclFloat64, 70001, 1002)) return 1;
    printf("rank %d: coll ok (%d datatypes skipped)\n", g_rank, nskip);
    return 0;
}

static void *abort_on_thread(void *arg)
{
    return (void *)(intptr_t)ncclCommAbort((ncclComm_t)arg);
}

/* ---- premulsum ----------------------------------------------------------------------------- */
int test_premulsum(ncclComm_t world)
{
    int n = g_nranks;
    size_t count = 1031;
    ncclRedOp_t op;
    char scalar[8];
    store(scalar, ncclFloat32, 0, 2);
    CHECK(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, world) ==
              ncclInvalidUsage,
          "ncclScalarDevice on host: %s", ncclGetLastError(NULL));
    ncclResult_t r =
        ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarHostImmediate, world);
    if (r == ncclInvalidUsage && !require_premulsum &&
        strstr(ncclGetLastError(NULL), "not implemented")) {
        printf("rank %d: premulsum skipped: %s\n", g_rank, ncclGetLastError(NULL));
        return 0;
    }
    CHECK(r == ncclSuccess, "create: %d %s", r, ncclGetLastError(NULL));
    NCCLOK(ncclRedOpDestroy(op, world));
    CHECK(ncclRedOpDestroy(op, world) == ncclInvalidArgument, "destroyed twice");
    CHECK(ncclRedOpDestroy(ncclSum, world) == ncclInvalidArgument, "built-in op destroyed");
    char *s = malloc((size_t)n * count * 8), *o = malloc((size_t)n * count * 8);
    CHECK(s && o, "malloc");
    for (int dt = 0; dt < ncclNumTypes; dt++) {
        ncclDataType_t t = (ncclDataType_t)dt;
        int fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
        double k = fp8 ? -1 : (t == ncclUint8 || t == ncclUint32 || t == ncclUint64) ? 3 : -2;
        store(scalar, t, 0, k);
        r = ncclRedOpCreatePreMulSum(&op, scalar, t, ncclScalarHostImmediate, world);
        int fail;
        if (dtype_skipped(r, t, &fail)) continue;
        CHECK(!fail && r == ncclSuccess, "create %s: %s", dt_name(t), ncclGetLastError(NULL));
        fill(s, t, ncclSum, g_rank, n, 0, count, 40 + dt);
        NCCLOK(ncclAllReduce(s, o, count, t, op, world, NULL));
        char label[64];
        snprintf(label, sizeof(label), "premulsum allreduce %s x%g", dt_name(t), k);
        CHECK(!check_reduced(o, t, ncclSum, n, 0, count, 40 + dt, k, label), "%s", label);
        fill(s, t, ncclSum, g_rank, n, 0, count * (size_t)n, 60 + dt);
        NCCLOK(ncclReduceScatter(s, o, count, t, op, world, NULL));
        snprintf(label, sizeof(label), "premulsum reduce_scatter %s", dt_name(t));
        CHECK(!check_reduced(o, t, ncclSum, n, (size_t)g_rank * count, count, 60 + dt, k, label),
              "%s", label);
        /* An op is bound to its datatype. */
        ncclDataType_t other = t == ncclFloat64 ? ncclFloat32 : ncclFloat64;
        CHECK(ncclAllReduce(s, o, 1, other, op, world, NULL) == ncclInvalidArgument,
              "op of %s used with %s", dt_name(t), dt_name(other));
        NCCLOK(ncclRedOpDestroy(op, world));
    }
    /* As PyTorch's ncclRedOpRAII inside coalescing: an op destroyed in the group that recorded
     * calls with it (NCCL allows that once the calls returned) still serves them. */
    float *g = (float *)(void *)s;
    store(scalar, ncclFloat32, 0, 3);
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarHostImmediate, world));
    for (int k = 0; k < 2; k++) {
        fill(g + k * count, ncclFloat32, ncclSum, g_rank, n, 0, count, 80 + k);
        NCCLOK(ncclAllReduce(g + k * count, g + k * count, count, ncclFloat32, op, world, NULL));
    }
    NCCLOK(ncclRedOpDestroy(op, world));
    EXPECT(ncclRedOpDestroy(op, world), ncclInvalidArgument, "destroyed already");
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++)
        CHECK(!check_reduced(g + k * count, ncclFloat32, ncclSum, n, 0, count, 80 + k, 3,
                             "premulsum destroyed in its group"),
              "premulsum op destroyed in its group, call %d", k);
    /* A communicator aborted by another thread while this thread's open group holds a call
     * with its PreMulSum op: the group's end fails naming it and touches no freed memory (the
     * ASan build sees that). */
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    ncclComm_t x;
    NCCLOK(ncclCommInitRank(&x, n, id, g_rank));
    /* An op belongs to the communicator it was created on (NCCL 2.26 mangles its values with
     * the comm): given to another one it is refused, in a collective and in ncclRedOpDestroy,
     * rather than taken for that one's op of the same slot (with its scalar). */
    ncclRedOp_t opw, opx;
    store(scalar, ncclFloat32, 0, 2);
    NCCLOK(ncclRedOpCreatePreMulSum(&opw, scalar, ncclFloat32, ncclScalarHostImmediate, world));
    store(scalar, ncclFloat32, 0, 5);
    NCCLOK(ncclRedOpCreatePreMulSum(&opx, scalar, ncclFloat32, ncclScalarHostImmediate, x));
    CHECK(opw != opx && (int)opw >= ncclNumOps && (int)opx >= ncclNumOps &&
              (long)opw <= (long)ncclMaxRedOp && (long)opx <= (long)ncclMaxRedOp,
          "ops of two communicators: %d and %d", (int)opw, (int)opx);
    EXPECT(ncclAllReduce(g, g, count, ncclFloat32, opw, x, NULL), ncclInvalidArgument,
           "another communicator");
    EXPECT(ncclRedOpDestroy(opw, x), ncclInvalidArgument, "another communicator");
    fill(g, ncclFloat32, ncclSum, g_rank, n, 0, count, 85);
    NCCLOK(ncclAllReduce(g, g, count, ncclFloat32, opx, x, NULL));
    CHECK(!check_reduced(g, ncclFloat32, ncclSum, n, 0, count, 85, 5, "premulsum on x"),
          "x's op after another comm's op was refused on x");
    NCCLOK(ncclRedOpDestroy(opx, x));
    NCCLOK(ncclRedOpDestroy(opw, world));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarHostImmediate, x));
    NCCLOK(ncclAllReduce(g, g, count, ncclFloat32, op, x, NULL));
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, abort_on_thread, x) == 0, "pthread_create");
    pthread_join(th, &ret);
    CHECK((intptr_t)ret == ncclSuccess, "ncclCommAbort on a thread: %d", (int)(intptr_t)ret);
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "not a communicator");
    free(s);
    free(o);
    printf("rank %d: premulsum ok\n", g_rank);
    return 0;
}
