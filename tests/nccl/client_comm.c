/* The NCCL client's communicator tests: non-blocking and grouped inits, a config from NCCL
 * 2.14's nccl.h and a failed group's async error (test_nonblocking); ncclCommSplit with keys
 * and NCCL_SPLIT_NOCOLOR (test_split); ncclCommInitAll with grouped collectives and splits
 * (test_initall); and refused arguments, ncclGetLastError and failed inits (test_errors). */
#define _GNU_SOURCE
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- nonblocking, split, initall ------------------------------------------------------------ */
int test_nonblocking(ncclComm_t world)
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

int test_split(ncclComm_t world)
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
int test_initall(ncclComm_t world)
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

int test_errors(ncclComm_t world)
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
