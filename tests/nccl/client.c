/* nccl_client: braid's NCCL drop-in exercised by a program that includes nccl.h only.
 *
 * Usage (one rank of a job; tests/mp/test_nccl.c runs it under braid-run with 1..8 ranks):
 *   nccl_client [--require-fp8] [--require-premulsum] TEST...
 * TESTs: api coll groups p2p nonblocking split initall errors refused premulsum close inits
 * (all = each of them),
 * kill (the last rank is SIGKILLed in a collective; the others must get ncclRemoteError or
 * ncclSystemError naming it, and nothing hangs), env (init, one all-reduce, destroy: for the
 * NCCL_* environment tests); alone, as the process's only test: abort_init, env_blocking,
 * env_conf (client_p2p.c, client_env.c). Exits 0 when every check passed.
 *
 * Rank and size come from BRAID_RANK/BRAID_NRANKS (braid-run) or OMPI_COMM_WORLD_RANK/SIZE;
 * the world communicator's id comes from NCCL_COMM_ID (set to braid-run's BRAID_ROOT when
 * unset), so every rank calls ncclGetUniqueId itself, as NCCL programs do with NCCL_COMM_ID.
 * Later communicators get ids the usual way: rank 0 creates one and broadcasts it. */
#define _GNU_SOURCE
#include "client.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int g_rank, g_nranks;
static int require_fp8, require_premulsum;

static int env_int(const char *a, const char *b, int def)
{
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : def;
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int shared_id(ncclComm_t world, ncclUniqueId *id)
{
    memset(id, 0, sizeof(*id));
    if (g_rank == 0) NCCLOK(ncclGetUniqueId(id));
    NCCLOK(ncclBroadcast(id, id, sizeof(*id), ncclUint8, 0, world, NULL));
    return 0;
}

/* ---- api ----------------------------------------------------------------------------------- */
static int test_api(ncclComm_t world)
{
    int v = 0;
    NCCLOK(ncclGetVersion(&v));
    CHECK(v == NCCL_VERSION_CODE, "ncclGetVersion %d, header %d (another libnccl?)", v,
          NCCL_VERSION_CODE);
    for (int a = 0; a < ncclNumResults; a++) {
        const char *s = ncclGetErrorString((ncclResult_t)a);
        CHECK(s && *s, "no string for result %d", a);
        for (int b = 0; b < a; b++)
            CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)b)), "results %d and %d read '%s'", a,
                  b, s);
    }
    CHECK(ncclGetErrorString((ncclResult_t)99) != NULL, "unknown result");
    int n = -1, r = -1, dev = -1;
    NCCLOK(ncclCommCount(world, &n));
    NCCLOK(ncclCommUserRank(world, &r));
    NCCLOK(ncclCommCuDevice(world, &dev));
    CHECK(n == g_nranks && r == g_rank && dev == 0, "count %d rank %d device %d", n, r, dev);
    ncclResult_t st = ncclInternalError;
    NCCLOK(ncclCommGetAsyncError(world, &st));
    CHECK(st == ncclSuccess, "async error %d", (int)st);

    /* ncclMemAlloc'd and registered buffers in a collective. */
    size_t count = 4099;
    float *a = NULL, *b = NULL;
    NCCLOK(ncclMemAlloc((void **)&a, count * sizeof(float)));
    NCCLOK(ncclMemAlloc((void **)&b, count * sizeof(float)));
    CHECK(((uintptr_t)a & 4095) == 0, "ncclMemAlloc is page aligned");
    void *ha = NULL, *hb = NULL;
    NCCLOK(ncclCommRegister(world, a, count * sizeof(float), &ha));
    NCCLOK(ncclCommRegister(world, b, count * sizeof(float), &hb));
    fill(a, ncclFloat32, ncclSum, g_rank, g_nranks, 0, count, 11);
    NCCLOK(ncclAllReduce(a, b, count, ncclFloat32, ncclSum, world, NULL));
    CHECK(!check_reduced(b, ncclFloat32, ncclSum, g_nranks, 0, count, 11, 0, "registered"),
          "registered all-reduce");
    NCCLOK(ncclCommDeregister(world, ha));
    NCCLOK(ncclCommDeregister(world, hb));
    /* As NCCL: a NULL handle is nothing to do, an unknown one is a usage error. */
    EXPECT(ncclCommDeregister(world, hb), ncclInvalidUsage, "not registered");
    NCCLOK(ncclCommDeregister(world, NULL));
    NCCLOK(ncclMemFree(a));
    NCCLOK(ncclMemFree(b));
    CHECK(ncclMemAlloc(NULL, 8) == ncclInvalidArgument, "ncclMemAlloc(NULL)");
    CHECK(ncclMemAlloc((void **)&a, 0) == ncclInvalidArgument, "ncclMemAlloc(size 0)");
    NCCLOK(ncclCommFinalize(world));
    NCCLOK(ncclCommFinalize(NULL));
    /* The profiling names are the same functions. */
    int pv = 0;
    NCCLOK(pncclGetVersion(&pv));
    CHECK(pv == v, "pncclGetVersion %d", pv);
    printf("rank %d: api ok\n", g_rank);
    return 0;
}

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

static int test_coll(ncclComm_t world)
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
static int test_premulsum(ncclComm_t world)
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

/* ---- nonblocking, split, initall ------------------------------------------------------------ */
int allreduce_check(ncclComm_t c, int rank, int n, int seed, const char *what)
{
    size_t count = 777;
    int32_t *a = malloc(count * 4);
    CHECK(a, "malloc");
    fill(a, ncclInt32, ncclSum, rank, n, 0, count, seed);
    NCCLOK(ncclAllReduce(a, a, count, ncclInt32, ncclSum, c, NULL));
    CHECK(!check_reduced(a, ncclInt32, ncclSum, n, 0, count, seed, 0, what), "%s", what);
    free(a);
    return 0;
}

static int test_nonblocking(ncclComm_t world)
{
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, g_nranks, id, g_rank, &cfg);
    CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init: %d %s", r,
          ncclGetLastError(NULL));
    ncclResult_t st = ncclInProgress;
    double t0 = now_s();
    int polls = 0;
    while (st == ncclInProgress && now_s() - t0 < 60) {
        NCCLOK(ncclCommGetAsyncError(c, &st));
        polls++;
        if (st == ncclInProgress) usleep(200);
    }
    CHECK(st == ncclSuccess, "init state %d after %d polls: %s", st, polls, ncclGetLastError(c));
    if (allreduce_check(c, g_rank, g_nranks, 5, "non-blocking comm")) return 1;
    NCCLOK(ncclCommDestroy(c));
    /* A grouped init across the processes. */
    if (shared_id(world, &id)) return 1;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&c, g_nranks, id, g_rank));
    NCCLOK(ncclGroupEnd());
    if (allreduce_check(c, g_rank, g_nranks, 6, "grouped init")) return 1;
    NCCLOK(ncclCommDestroy(c));
    /* A config from NCCL 2.14-2.16's nccl.h (24 bytes, up to blocking) is accepted, as NCCL
     * does: its non-blocking init. */
    struct {
        size_t size;
        unsigned magic, version;
        int blocking;
    } old = {sizeof(old), 0xcafebeef, NCCL_VERSION(2, 14, 0), 0};
    CHECK(sizeof(old) == 24, "the 2.14 config is %zu bytes", sizeof(old));
    if (shared_id(world, &id)) return 1;
    r = ncclCommInitRankConfig(&c, g_nranks, id, g_rank, (ncclConfig_t *)(void *)&old);
    CHECK(r == ncclInProgress, "init with NCCL 2.14's config: %d %s", (int)r,
          ncclGetLastError(NULL));
    for (st = ncclInProgress, t0 = now_s(); st == ncclInProgress && now_s() - t0 < 60;)
        NCCLOK(ncclCommGetAsyncError(c, &st));
    CHECK(st == ncclSuccess, "init with NCCL 2.14's config: state %d", (int)st);
    if (allreduce_check(c, g_rank, g_nranks, 8, "NCCL 2.14's config")) return 1;
    /* A failed group leaves its error as the async error of its non-blocking communicators, as
     * NCCL's groupCleanup: later calls are refused with it, ncclCommAbort frees the comm. Every
     * rank fails the same group (its all-reduce is dropped everywhere). */
    float one = 1;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, c, NULL));
    EXPECT(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument,
           "comm is NULL");
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "comm is NULL");
    CHECK(one == 1, "a failed group ran its all-reduce (%g)", one);
    NCCLOK(ncclCommGetAsyncError(c, &st));
    CHECK(st == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "comm is NULL"),
          "a non-blocking comm's async error after a failed group: %d '%s'", (int)st,
          ncclGetLastError(NULL));
    EXPECT(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument,
           "a group of the communicator's calls failed");
    int k = 0;
    EXPECT(ncclCommCount(c, &k), ncclInvalidArgument, "a group of the communicator's calls failed");
    NCCLOK(ncclCommAbort(c));
    printf("rank %d: nonblocking ok (%d polls)\n", g_rank, polls);
    return 0;
}

static int test_split(ncclComm_t world)
{
    int n = g_nranks, color = g_rank % 2, key = n - g_rank;
    ncclComm_t sub = NULL;
    NCCLOK(ncclCommSplit(world, color, key, &sub, NULL));
    CHECK(sub != NULL, "no communicator for color %d", color);
    int sn = 0, sr = -1;
    NCCLOK(ncclCommCount(sub, &sn));
    NCCLOK(ncclCommUserRank(sub, &sr));
    int want_n = (n + 1 - color) / 2, want_r = want_n - 1 - g_rank / 2; /* keys reverse ranks */
    CHECK(sn == want_n && sr == want_r, "split: size %d rank %d, want %d %d", sn, sr, want_n,
          want_r);
    if (allreduce_check(sub, sr, sn, 7 + color, "split comm")) return 1;
    NCCLOK(ncclCommDestroy(sub));
    /* Rank 0 takes no part; the others split again. Rank 0's config is not initialised: as
     * NCCL, a NOCOLOR rank's config is not read (a refusal would fail the parent everywhere). */
    sub = (ncclComm_t)&sub;
    ncclConfig_t junk;
    memset(&junk, 0x5a, sizeof(junk));
    NCCLOK(ncclCommSplit(world, g_rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, g_rank, &sub,
                         g_rank == 0 ? &junk : NULL));
    if (g_rank == 0) {
        CHECK(sub == NULL, "NOCOLOR gave a communicator");
    } else {
        NCCLOK(ncclCommCount(sub, &sn));
        CHECK(sn == n - 1, "size %d", sn);
        if (allreduce_check(sub, g_rank - 1, n - 1, 9, "split without rank 0")) return 1;
        NCCLOK(ncclCommDestroy(sub));
    }
    printf("rank %d: split ok\n", g_rank);
    return 0;
}

/* One process, three ranks: ncclCommInitAll, then grouped collectives over the three. */
static int test_initall(ncclComm_t world)
{
    (void)world;
    enum { ND = 3 };
    ncclComm_t comms[ND];
    NCCLOK(ncclCommInitAll(comms, ND, NULL));
    size_t count = 1031;
    float *buf[ND];
    for (int i = 0; i < ND; i++) {
        int r = -1;
        NCCLOK(ncclCommUserRank(comms[i], &r));
        CHECK(r == i, "comm %d has rank %d", i, r);
        /* NCCL's device i where braid sees ND devices; host ranks keep the current one. */
        int d = -1, d0 = -1;
        NCCLOK(ncclCommCuDevice(comms[0], &d0));
        NCCLOK(ncclCommCuDevice(comms[i], &d));
        CHECK(d == i || d == d0, "comm %d has device %d (comm 0: %d)", i, d, d0);
        buf[i] = malloc(count * sizeof(float));
        CHECK(buf[i], "malloc");
        fill(buf[i], ncclFloat32, ncclMax, i, ND, 0, count, 21);
    }
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i++)
        NCCLOK(ncclAllReduce(buf[i], buf[i], count, ncclFloat32, ncclMax, comms[i], NULL));
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < ND; i++)
        CHECK(!check_reduced(buf[i], ncclFloat32, ncclMax, ND, 0, count, 21, 0, "initall"),
              "initall comm %d", i);
    /* One thread splits its three ranks in a group (outside one, the first split would wait
     * for the others): rank 1 takes no part, ranks 0 and 2 swap places by their keys. */
    ncclComm_t sub[ND];
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i++) {
        sub[i] = (ncclComm_t)&sub[i];
        NCCLOK(ncclCommSplit(comms[i], i == 1 ? NCCL_SPLIT_NOCOLOR : 7, ND - i, &sub[i], NULL));
    }
    /* As NCCL: every handle is NULL until the split ran, at the group's end. */
    for (int i = 0; i < ND; i++)
        CHECK(sub[i] == NULL, "split %d's handle before its group's end: %p", i, (void *)sub[i]);
    NCCLOK(ncclGroupEnd());
    CHECK(sub[1] == NULL, "NOCOLOR gave a communicator");
    int sr[ND] = {-1, -1, -1}, sn = 0;
    for (int i = 0; i < ND; i += 2) {
        NCCLOK(ncclCommUserRank(sub[i], &sr[i]));
        NCCLOK(ncclCommCount(sub[i], &sn));
        CHECK(sn == 2, "split size %d", sn);
        fill(buf[i], ncclFloat32, ncclSum, sr[i], 2, 0, count, 22);
    }
    CHECK(sr[0] == 1 && sr[2] == 0, "split ranks %d %d (keys reverse them)", sr[0], sr[2]);
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i += 2)
        NCCLOK(ncclAllReduce(buf[i], buf[i], count, ncclFloat32, ncclSum, sub[i], NULL));
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < ND; i += 2) {
        CHECK(!check_reduced(buf[i], ncclFloat32, ncclSum, 2, 0, count, 22, 0, "grouped split"),
              "grouped split comm %d", i);
        NCCLOK(ncclCommDestroy(sub[i]));
    }
    /* Two splits of each parent in one group (rows and columns): they run in call order. */
    ncclComm_t rows[ND], cols[ND];
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i++) {
        NCCLOK(ncclCommSplit(comms[i], i % 2, i, &rows[i], NULL));
        NCCLOK(ncclCommSplit(comms[i], 0, ND - i, &cols[i], NULL));
    }
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < ND; i++) {
        int rn = 0, cn = 0, cr = -1;
        NCCLOK(ncclCommCount(rows[i], &rn));
        NCCLOK(ncclCommCount(cols[i], &cn));
        NCCLOK(ncclCommUserRank(cols[i], &cr));
        CHECK(rn == (i % 2 ? 1 : 2) && cn == ND && cr == ND - 1 - i,
              "rank %d: row size %d, column size %d rank %d", i, rn, cn, cr);
    }
    for (int i = 0; i < ND; i++) {
        NCCLOK(ncclCommDestroy(rows[i]));
        NCCLOK(ncclCommDestroy(cols[i]));
    }
    /* A group that fails (a bad call on every rank) runs none of its splits: they are refused
     * on every rank, so nobody waits for them, and the parents stay usable. */
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i++) {
        NCCLOK(ncclCommSplit(comms[i], 0, i, &sub[i], NULL));
        EXPECT(ncclAllReduce(buf[i], buf[i], 1, (ncclDataType_t)77, ncclSum, comms[i], NULL),
               ncclInvalidArgument, "datatype=77");
    }
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "datatype=77");
    for (int i = 0; i < ND; i++) {
        /* Never run: the handle stays NULL (as NCCL's). */
        CHECK(sub[i] == NULL, "a split of a failed group was made: %p", (void *)sub[i]);
        fill(buf[i], ncclFloat32, ncclSum, i, ND, 0, count, 23);
    }
    NCCLOK(ncclGroupStart());
    for (int i = 0; i < ND; i++)
        NCCLOK(ncclAllReduce(buf[i], buf[i], count, ncclFloat32, ncclSum, comms[i], NULL));
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < ND; i++)
        CHECK(!check_reduced(buf[i], ncclFloat32, ncclSum, ND, 0, count, 23, 0, "after"),
              "comm %d after the failed group", i);
    for (int i = 0; i < ND; i++) {
        NCCLOK(ncclCommDestroy(comms[i]));
        free(buf[i]);
    }
    printf("rank %d: initall ok\n", g_rank);
    return 0;
}

/* ---- errors -------------------------------------------------------------------------------- */
static void *fail_on_thread(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)ncclGetUniqueId(NULL);
}

/* ncclGetLastError is the process's last failure, as NCCL's: whichever thread failed (a
 * non-blocking init's included), and later successful calls do not clear it. */
static int last_error(void)
{
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, fail_on_thread, NULL) == 0, "pthread_create");
    pthread_join(th, &ret);
    CHECK((intptr_t)ret == ncclInvalidArgument, "ncclGetUniqueId(NULL) on a thread: %d",
          (int)(intptr_t)ret);
    int v;
    NCCLOK(ncclGetVersion(&v));
    CHECK(strstr(ncclGetLastError(NULL), "uniqueId is NULL"),
          "another thread's failure, after a success: '%s'", ncclGetLastError(NULL));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclUniqueId zero;
    memset(&zero, 0, sizeof(zero));
    ncclResult_t r = ncclCommInitRankConfig(&c, 1, zero, 0, &cfg), st = ncclInProgress;
    CHECK(r == ncclInProgress || r == ncclInvalidArgument, "init with a zero id: %d", (int)r);
    for (double t0 = now_s(); r == ncclInProgress && st == ncclInProgress && now_s() - t0 < 30;)
        NCCLOK(ncclCommGetAsyncError(c, &st));
    CHECK(r == ncclInvalidArgument || st == ncclInvalidArgument, "zero id: %d", (int)st);
    CHECK(strstr(ncclGetLastError(NULL), "ncclCommInitRank (rank 0 of 1)"),
          "a non-blocking init's failure: '%s'", ncclGetLastError(NULL));
    int x; /* the queries of a failed init's communicator return its error */
    if (r == ncclInProgress) EXPECT(ncclCommUserRank(c, &x), ncclInvalidArgument, "init failed");
    /* As NCCL (ncclCommInitRankDev sets *newcomm before its init job runs): a failed blocking
     * init leaves *comm at its communicator, in error, which ncclCommDestroy or ncclCommAbort
     * frees. Calls on it return the init's error (the shim's own rule: NCCL 2.26's
     * ncclCommEnsureReady passes a blocking communicator, whose queries give zeros). An argument
     * refused before the init clears *comm (NCCL's fail path). */
    ncclComm_t b = (ncclComm_t)&b;
    EXPECT(ncclCommInitRank(&b, 1, zero, 0), ncclInvalidArgument, "rank 0 of 1");
    CHECK(b != NULL && b != (ncclComm_t)&b, "a failed blocking init left *comm %p", (void *)b);
    EXPECT(ncclCommCount(b, &x), ncclInvalidArgument, "init failed");
    /* The init's failure is kept once: a later call's message does not nest it again, and
     * ncclCommGetAsyncError reports it after another call's failure. */
    for (int i = 0; i < 2; i++)
        EXPECT(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, b, NULL), ncclInvalidArgument,
               "init failed");
    const char *nest = strstr(ncclGetLastError(NULL), "init failed");
    CHECK(nest && !strstr(nest + 1, "init failed") && !strstr(nest, "ncclAllReduce"),
          "the init's failure nested: '%s'", ncclGetLastError(NULL));
    EXPECT(ncclCommCount(b, NULL), ncclInvalidArgument, "count is NULL");
    ncclResult_t bst = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(b, &bst));
    CHECK(bst == ncclInvalidArgument, "a failed blocking init's async error %d", (int)bst);
    CHECK(strstr(ncclGetLastError(NULL), "rank 0 of 1") &&
              !strstr(ncclGetLastError(NULL), "count is NULL"),
          "a failed init's async error after another failure: '%s'", ncclGetLastError(NULL));
    NCCLOK(ncclCommDestroy(b));
    EXPECT(ncclCommCount(b, &x), ncclInvalidArgument, "not a communicator");
    b = (ncclComm_t)&b;
    EXPECT(ncclCommInitRank(&b, 1, zero, 0), ncclInvalidArgument, "rank 0 of 1");
    NCCLOK(ncclCommAbort(b));
    b = (ncclComm_t)&b;
    EXPECT(ncclCommInitRank(&b, 2, zero, 2), ncclInvalidArgument, "rank=2");
    CHECK(b == NULL, "a refused init left *comm %p", (void *)b);
    /* The failed non-blocking init's communicator is still the program's to destroy. */
    if (r == ncclInProgress) {
        CHECK(c != NULL, "a non-blocking init returned ncclInProgress and no communicator");
        NCCLOK(ncclCommDestroy(c));
        EXPECT(ncclCommDestroy(c), ncclInvalidArgument, "not a communicator");
    }
    return 0;
}

static int test_errors(ncclComm_t world)
{
    float x[16] = {0};
    int n = g_nranks;
    EXPECT(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument, "comm");
    EXPECT(ncclAllReduce(x, x, 4, (ncclDataType_t)99, ncclSum, world, NULL), ncclInvalidArgument,
           "datatype");
    EXPECT(ncclAllReduce(x, x, 4, ncclFloat, (ncclRedOp_t)77, world, NULL), ncclInvalidArgument,
           "op=77");
    EXPECT(ncclReduce(x, x, 4, ncclFloat, ncclSum, n, world, NULL), ncclInvalidArgument, "root");
    EXPECT(ncclBroadcast(x, x, 4, ncclFloat, -1, world, NULL), ncclInvalidArgument, "root");
    EXPECT(ncclAllReduce(NULL, x, 4, ncclFloat, ncclSum, world, NULL), ncclInvalidArgument,
           "sendbuf");
    EXPECT(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
    ncclComm_t c;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    EXPECT(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, "nranks");
    EXPECT(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument, "rank");
    EXPECT(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument, "comm");
    EXPECT(ncclCommInitRank(&c, 1, id, 0), ncclInvalidArgument, "id"); /* all-zero id */
    NCCLOK(ncclCommDestroy(c)); /* the failed init's communicator, as NCCL's */
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    EXPECT(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument, "config");
    CHECK(c == NULL, "a refused config left *comm %p", (void *)c);
    /* Inside a group, an init's refused argument fails the group's end too (NCCL's
     * ncclGroupErrCheck). */
    NCCLOK(ncclGroupStart());
    EXPECT(ncclCommInitRank(&c, 2, id, 5), ncclInvalidArgument, "rank=5");
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "rank=5");
    EXPECT(ncclCommCount(world, NULL), ncclInvalidArgument, "count");
    c = (ncclComm_t)&c; /* NCCL's ncclCommSplit clears *newcomm when it refuses the call */
    EXPECT(ncclCommSplit(NULL, 0, 0, &c, NULL), ncclInvalidArgument, "comm is NULL");
    CHECK(c == NULL, "a split of no communicator left *newcomm %p", (void *)c);
    EXPECT(ncclGetUniqueId(NULL), ncclInvalidArgument, "uniqueId");
    EXPECT(ncclRedOpDestroy(ncclMax, world), ncclInvalidArgument, "built-in");
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclGroupSimulateEnd(&si)); /* nothing to estimate: NCCL leaves it, and so does braid */
    /* A bad call inside a group: it fails, the group runs nothing and fails at its end. */
    x[0] = 1;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, world, NULL));
    EXPECT(ncclAllReduce(x, x, 4, (ncclDataType_t)42, ncclSum, world, NULL), ncclInvalidArgument,
           "datatype");
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "datatype");
    CHECK(x[0] == 1, "a failed group ran its first call (%g)", x[0]);
    /* The communicator still works. */
    if (allreduce_check(world, g_rank, n, 13, "after errors")) return 1;
    ncclResult_t st;
    NCCLOK(ncclCommGetAsyncError(world, &st));
    CHECK(st == ncclSuccess, "async error %d after argument errors", st);
    if (last_error()) return 1;
    /* A destroyed communicator's handle stays refused after a new one was made (its memory is
     * not handed to the next one): here grouped inits that failed (an all-zero id). */
    ncclComm_t a = NULL, b = NULL;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&a, 1, id, 0));
    EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidArgument, "id");
    NCCLOK(ncclCommDestroy(a));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&b, 1, id, 0));
    EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidArgument, "id");
    CHECK(a != b, "a new communicator at a destroyed one's address %p", (void *)a);
    int k;
    EXPECT(ncclCommCount(a, &k), ncclInvalidArgument, "not a communicator");
    NCCLOK(ncclCommDestroy(b));
    printf("rank %d: errors ok\n", g_rank);
    return 0;
}

/* ---- kill ---------------------------------------------------------------------------------- */
static int test_kill(void)
{
    int n = g_nranks, victim = n - 1;
    if (g_rank == victim) {
        /* braid-run ends the job when a rank it started dies: the rank runs in a child. */
        pid_t pid = fork();
        if (pid > 0) {
            int status;
            waitpid(pid, &status, 0);
            printf("rank %d: victim %s\n", g_rank,
                   WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? "killed" : "NOT killed");
            return !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        }
    }
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    ncclComm_t world;
    NCCLOK(ncclCommInitRank(&world, n, id, g_rank));
    for (int i = 0; i < 2; i++)
        if (allreduce_check(world, g_rank, n, 30 + i, "before the kill")) return 1;
    if (g_rank == victim) raise(SIGKILL);
    size_t count = 1 << 16;
    float *a = calloc(count, sizeof(float));
    CHECK(a, "calloc");
    double t0 = now_s();
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < 1000 && r == ncclSuccess; i++)
        r = ncclAllReduce(a, a, count, ncclFloat, ncclSum, world, NULL);
    double dt = now_s() - t0;
    const char *msg = ncclGetLastError(world);
    char want[32];
    snprintf(want, sizeof(want), "rank %d", victim);
    CHECK(r == ncclRemoteError || r == ncclSystemError, "got %d (%s): %s", r, ncclGetErrorString(r),
          msg);
    CHECK(strstr(msg, want), "message '%s' does not name %s", msg, want);
    ncclResult_t st = ncclSuccess;
    NCCLOK(ncclCommGetAsyncError(world, &st));
    CHECK(st == ncclRemoteError || st == ncclSystemError, "async error %d", st);
    NCCLOK(ncclCommAbort(world));
    free(a);
    printf("rank %d: kill ok after %.2f s: %s: %s\n", g_rank, dt, ncclGetErrorString(r), msg);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_rank = env_int("BRAID_RANK", "OMPI_COMM_WORLD_RANK", 0);
    g_nranks = env_int("BRAID_NRANKS", "OMPI_COMM_WORLD_SIZE", 1);
    if (!getenv("NCCL_COMM_ID") && getenv("BRAID_ROOT"))
        setenv("NCCL_COMM_ID", getenv("BRAID_ROOT"), 1);
    const char *tests[32];
    int nt = 0;
    for (int i = 1; i < argc && nt < 30; i++) {
        if (!strcmp(argv[i], "--require-fp8"))
            require_fp8 = 1;
        else if (!strcmp(argv[i], "--require-premulsum"))
            require_premulsum = 1;
        else if (!strcmp(argv[i], "all")) {
            static const char *all[] = {"api",         "coll",      "groups",  "p2p",
                                        "nonblocking", "split",     "initall", "errors",
                                        "refused",     "premulsum", "close",   "inits"};
            for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
                tests[nt++] = all[k];
        } else
            tests[nt++] = argv[i];
    }
    if (nt == 1 && !strcmp(tests[0], "kill")) return test_kill();
    if (nt == 1 && !strcmp(tests[0], "abort_init")) return test_abort_init();
    if (nt == 1 && !strcmp(tests[0], "env_blocking")) return test_env_blocking();
    if (nt == 1 && !strcmp(tests[0], "env_conf")) return test_env_conf();
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    ncclComm_t world;
    NCCLOK(ncclCommInitRank(&world, g_nranks, id, g_rank));
    unsetenv("NCCL_COMM_ID"); /* later ids: rank 0 makes them and broadcasts */
    int fail = 0;
    for (int i = 0; i < nt && !fail; i++) {
        const char *t = tests[i];
        if (!strcmp(t, "api"))
            fail = test_api(world);
        else if (!strcmp(t, "coll"))
            fail = test_coll(world);
        else if (!strcmp(t, "groups"))
            fail = test_groups(world);
        else if (!strcmp(t, "p2p"))
            fail = test_p2p(world);
        else if (!strcmp(t, "nonblocking"))
            fail = test_nonblocking(world);
        else if (!strcmp(t, "split"))
            fail = g_nranks > 1 ? test_split(world) : 0;
        else if (!strcmp(t, "initall"))
            fail = test_initall(world);
        else if (!strcmp(t, "errors"))
            fail = test_errors(world);
        else if (!strcmp(t, "refused"))
            fail = test_refused(world);
        else if (!strcmp(t, "premulsum"))
            fail = test_premulsum(world);
        else if (!strcmp(t, "close"))
            fail = test_close(world);
        else if (!strcmp(t, "inits"))
            fail = test_inits(world);
        else if (!strcmp(t, "env"))
            fail = allreduce_check(world, g_rank, g_nranks, 3, "env");
        else {
            fprintf(stderr, "nccl_client: unknown test '%s'\n", t);
            return 2;
        }
    }
    NCCLOK(ncclCommDestroy(world));
    if (!fail) printf("rank %d: nccl client passed\n", g_rank);
    return fail;
}
