/* Groups and point-to-point in the NCCL client: several collectives in one group, nested
 * groups (nothing runs before the outermost ncclGroupEnd), sends and receives posted in
 * adversarial orders (a ring with even ranks receiving first, every pair with peers in reverse
 * order, several messages per pair, self), the NCCL 2.28 all-to-all, gather and scatter. And
 * communicators closed under other threads' calls (test_close). */
#define _GNU_SOURCE
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int simulate(ncclComm_t world);

int test_groups(ncclComm_t world)
{
    int n = g_nranks;
    size_t c1 = 1031, c2 = 77;
    float *a = malloc(c1 * 4);
    int64_t *b = malloc(c2 * 8);
    uint8_t *d = malloc(c2);
    CHECK(a && b && d, "malloc");
    fill(a, ncclFloat32, ncclSum, g_rank, n, 0, c1, 71);
    fill(b, ncclInt64, ncclMin, g_rank, n, 0, c2, 72);
    fill(d, ncclUint8, ncclSum, g_rank, n, 0, c2, 73);
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(a, a, c1, ncclFloat32, ncclSum, world, NULL));
    NCCLOK(ncclAllReduce(b, b, c2, ncclInt64, ncclMin, world, NULL));
    NCCLOK(ncclBroadcast(d, d, c2, ncclUint8, n - 1, world, NULL));
    NCCLOK(ncclGroupEnd());
    CHECK(!check_reduced(a, ncclFloat32, ncclSum, n, 0, c1, 71, 0, "group a"), "group a");
    CHECK(!check_reduced(b, ncclInt64, ncclMin, n, 0, c2, 72, 0, "group b"), "group b");
    CHECK(!check_rank(d, ncclUint8, ncclSum, n - 1, n, 0, c2, 73, "group d"), "group d");
    /* Nested: the inner end runs nothing. */
    fill(a, ncclFloat32, ncclMax, g_rank, n, 0, c1, 74);
    fill(b, ncclInt64, ncclProd, g_rank, n, 0, c2, 75);
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(a, a, c1, ncclFloat32, ncclMax, world, NULL));
    NCCLOK(ncclGroupEnd());
    if (n > 1)
        CHECK(!check_rank(a, ncclFloat32, ncclMax, g_rank, n, 0, c1, 74, "nested early"),
              "the inner ncclGroupEnd ran the call");
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(b, b, c2, ncclInt64, ncclProd, world, NULL));
    NCCLOK(ncclGroupEnd());
    NCCLOK(ncclGroupEnd());
    CHECK(!check_reduced(a, ncclFloat32, ncclMax, n, 0, c1, 74, 0, "nested a"), "nested a");
    CHECK(!check_reduced(b, ncclInt64, ncclProd, n, 0, c2, 75, 0, "nested b"), "nested b");
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclGroupEnd());
    free(a);
    free(b);
    free(d);
    if (simulate(world)) return 1;
    printf("rank %d: groups ok\n", g_rank);
    return 0;
}

/* ncclGroupSimulateEnd as NCCL 2.26's (ncclGroupEndInternal(simInfo)): NULL is ncclGroupEnd; a
 * simInfo without the initializer's magic fails the group; otherwise the inits run and no
 * operation does; braid cannot estimate a collective, so a group holding one is refused with
 * estimatedTime unchanged. A simulated group is local: one rank may simulate alone. */
static int simulate(ncclComm_t world)
{
    int n = g_nranks, me = g_rank;
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER, bad = NCCL_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, world, NULL));
    NCCLOK(ncclGroupSimulateEnd(NULL));
    CHECK(y[0] == n && y[3] == 4 * n, "ncclGroupSimulateEnd(NULL) did not run (%g)", y[0]);
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclMax, world, NULL));
    EXPECT(ncclGroupSimulateEnd(&bad), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclMax, world, NULL));
    EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidUsage, "estimate");
    CHECK(y[0] == n && si.estimatedTime == NCCL_UNDEF_FLOAT, "a simulated group ran (%g, %g)", y[0],
          si.estimatedTime);
    /* Point-to-point only: NCCL estimates nothing and launches nothing. */
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclSend(x, 4, ncclFloat32, me, world, NULL));
    NCCLOK(ncclRecv(y, 4, ncclFloat32, me, world, NULL));
    NCCLOK(ncclGroupSimulateEnd(&si));
    CHECK(y[0] == n, "a simulated receive ran (%g)", y[0]);
    /* A group simulated on one rank alone tells no peer (as NCCL): the next all-reduce pairs. */
    if (me == 0) {
        NCCLOK(ncclGroupStart());
        NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, world, NULL));
        EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidUsage, "estimate");
    }
    NCCLOK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, world, NULL));
    CHECK(y[0] == n && y[3] == 4 * n, "after a simulation on rank 0 alone (%g)", y[0]);
    /* An init runs (NCCL's async jobs do, simulated or not). */
    ncclUniqueId id;
    ncclComm_t one = NULL;
    int k = 0;
    NCCLOK(ncclGetUniqueId(&id));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&one, 1, id, 0));
    /* Its async error is ncclSuccess until the group's end (NCCL sets ncclInProgress there, and
     * only for a non-blocking one). */
    ncclResult_t st = ncclInProgress;
    NCCLOK(ncclCommGetAsyncError(one, &st));
    CHECK(st == ncclSuccess, "async error %d of an init waiting for its group's end", (int)st);
    /* Before its group's end (NCCL's ncclCommEnsureReady: initState is ncclInProgress). */
    EXPECT(ncclCommCount(one, &k), ncclInvalidArgument, "in progress");
    EXPECT(ncclCommUserRank(one, &k), ncclInvalidArgument, "in progress");
    EXPECT(ncclCommDestroy(one), ncclInvalidArgument, "in progress");
    NCCLOK(ncclGroupSimulateEnd(&si));
    NCCLOK(ncclCommCount(one, &k));
    CHECK(k == 1, "simulated init: %d ranks", k);
    NCCLOK(ncclCommDestroy(one));
    /* ncclCommAbort of an init waiting for its group's end returns ncclSuccess, as NCCL's; the
     * end does not run it, fails, and frees it. A grouped split's handle is NULL until its
     * group's end (as NCCL's), so the program has nothing to abort before: ncclCommAbort(NULL)
     * is a no-op, and the end runs the split. */
    ncclComm_t sp = NULL;
    NCCLOK(ncclGetUniqueId(&id));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&one, 1, id, 0));
    NCCLOK(ncclCommAbort(one));
    EXPECT(ncclCommCount(one, &k), ncclInvalidArgument, "aborted");
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "aborted");
    EXPECT(ncclCommCount(one, &k), ncclInvalidArgument, "not a communicator");
    sp = (ncclComm_t)&sp;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommSplit(world, 0, me, &sp, NULL));
    CHECK(sp == NULL, "a grouped split's handle before its group's end: %p", (void *)sp);
    NCCLOK(ncclGroupEnd());
    NCCLOK(ncclCommCount(sp, &k));
    CHECK(k == n, "grouped split: %d ranks", k);
    NCCLOK(ncclCommDestroy(sp));
    return allreduce_check(world, me, n, 27, "after simulations");
}

/* Seeds of the message from rank src to rank dst (the k-th of that pair). */
static int pair_seed(int src, int dst, int k)
{
    return 1000 + src * 64 + dst * 4 + k;
}

static int ring(ncclComm_t world, ncclDataType_t dt, size_t count, int nested)
{
    int n = g_nranks, right = (g_rank + 1) % n, left = (g_rank + n - 1) % n;
    size_t sz = dt_size(dt);
    char *s = malloc(count * sz + 1), *r = malloc(count * sz + 1);
    CHECK(s && r, "malloc");
    fill(s, dt, ncclSum, g_rank, n, 0, count, pair_seed(g_rank, right, 0));
    memset(r, 0x77, count * sz);
    NCCLOK(ncclGroupStart());
    if (nested) NCCLOK(ncclGroupStart());
    if (g_rank % 2) { /* odd ranks send first, even ones receive first */
        NCCLOK(ncclSend(s, count, dt, right, world, NULL));
        if (nested) NCCLOK(ncclGroupEnd());
        NCCLOK(ncclRecv(r, count, dt, left, world, NULL));
    } else {
        NCCLOK(ncclRecv(r, count, dt, left, world, NULL));
        if (nested) NCCLOK(ncclGroupEnd());
        NCCLOK(ncclSend(s, count, dt, right, world, NULL));
    }
    NCCLOK(ncclGroupEnd());
    char label[64];
    snprintf(label, sizeof(label), "ring %s count %zu%s", dt_name(dt), count,
             nested ? " nested" : "");
    /* the data is rank left's, seeded for the pair (left, me) */
    size_t bad = 0;
    char want[8];
    for (size_t k = 0; k < count; k++) {
        store(want, dt, 0, in_value(dt, ncclSum, left, n, k, pair_seed(left, g_rank, 0)));
        bad += memcmp(r + k * sz, want, sz) != 0;
    }
    CHECK(bad == 0, "%s: %zu elements differ", label, bad);
    free(s);
    free(r);
    return 0;
}

/* Every rank sends two messages to every rank (itself included) and receives them, peers in
 * reverse order for the sends and in order for the receives. */
static int all_pairs(ncclComm_t world)
{
    int n = g_nranks;
    size_t c[2] = {513, 3};
    int32_t *s = malloc((size_t)n * 2 * 513 * 4), *r = malloc((size_t)n * 2 * 513 * 4);
    CHECK(s && r, "malloc");
    NCCLOK(ncclGroupStart());
    for (int p = n - 1; p >= 0; p--)
        for (int k = 0; k < 2; k++) {
            int32_t *m = s + ((size_t)p * 2 + (size_t)k) * 513;
            fill(m, ncclInt32, ncclSum, g_rank, n, 0, c[k], pair_seed(g_rank, p, k));
            NCCLOK(ncclSend(m, c[k], ncclInt32, p, world, NULL));
        }
    for (int p = 0; p < n; p++)
        for (int k = 0; k < 2; k++)
            NCCLOK(
                ncclRecv(r + ((size_t)p * 2 + (size_t)k) * 513, c[k], ncclInt32, p, world, NULL));
    NCCLOK(ncclGroupEnd());
    for (int p = 0; p < n; p++)
        for (int k = 0; k < 2; k++) {
            const int32_t *m = r + ((size_t)p * 2 + (size_t)k) * 513;
            for (size_t i = 0; i < c[k]; i++) {
                int32_t want;
                store(&want, ncclInt32, 0,
                      in_value(ncclInt32, ncclSum, p, n, i, pair_seed(p, g_rank, k)));
                CHECK(m[i] == want, "pair from %d message %d index %zu: %d, want %d", p, k, i, m[i],
                      want);
            }
        }
    free(s);
    free(r);
    return 0;
}

/* All-to-all, gather and scatter: every datatype, counts 0, 1 and 101, out of place and in
 * place (all-to-all: sendbuf == recvbuf; gather: the root sends from its block of recvbuf;
 * scatter: the root receives into its block of sendbuf), the root moving with the case. */
static int extras_case(ncclComm_t world, ncclDataType_t dt, size_t count, int ip, int root)
{
    int n = g_nranks, me = g_rank;
    size_t es = dt_size(dt), blk = count * es;
    char *s = malloc((size_t)n * blk + 1), *r = malloc((size_t)n * blk + 1);
    CHECK(s && r, "malloc");
    char what[96];
    snprintf(what, sizeof(what), "%s count %zu %s root %d", dt_name(dt), count,
             ip ? "in place" : "out of place", root);
    /* all-to-all: the block for rank p is seeded by (me, p) */
    for (int p = 0; p < n; p++)
        fill(s + (size_t)p * blk, dt, ncclSum, me, n, 0, count, pair_seed(me, p, 2));
    char *a2a_out = ip ? s : r;
    NCCLOK(ncclAlltoAll(s, a2a_out, count, dt, world, NULL));
    for (int p = 0; p < n; p++)
        CHECK(!check_rank(a2a_out + (size_t)p * blk, dt, ncclSum, p, n, 0, count,
                          pair_seed(p, me, 2), "alltoall"),
              "alltoall %s: block %d", what, p);
    /* gather */
    const char *gsend = s;
    fill(s, dt, ncclSum, me, n, 0, count, 90);
    if (ip && me == root) {
        memcpy(r + (size_t)root * blk, s, blk);
        gsend = r + (size_t)root * blk;
    }
    NCCLOK(ncclGather(gsend, r, count, dt, root, world, NULL));
    for (int p = 0; me == root && p < n; p++)
        CHECK(!check_rank(r + (size_t)p * blk, dt, ncclSum, p, n, 0, count, 90, "gather"),
              "gather %s: block %d", what, p);
    /* scatter */
    if (me == root)
        for (int p = 0; p < n; p++)
            fill(s + (size_t)p * blk, dt, ncclSum, p, n, 0, count, 91);
    char *srecv = ip && me == root ? s + (size_t)root * blk : r;
    NCCLOK(ncclScatter(s, srecv, count, dt, root, world, NULL));
    CHECK(!check_rank(srecv, dt, ncclSum, me, n, 0, count, 91, "scatter"), "scatter %s", what);
    free(s);
    free(r);
    return 0;
}

static int extras(ncclComm_t world)
{
    static const size_t counts[] = {0, 1, 101};
    int k = 0;
    for (int dt = 0; dt < ncclNumTypes; dt++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (int ip = 0; ip < 2; ip++, k++)
                if (extras_case(world, (ncclDataType_t)dt, counts[c], ip, k % g_nranks)) return 1;
    return 0;
}

int test_p2p(ncclComm_t world)
{
    /* A message to self, in a group. */
    int32_t x = 1234567 + g_rank, y = 0;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclSend(&x, 1, ncclInt32, g_rank, world, NULL));
    NCCLOK(ncclRecv(&y, 1, ncclInt32, g_rank, world, NULL));
    NCCLOK(ncclGroupEnd());
    CHECK(y == x, "self message %d, want %d", y, x);
    for (int dt = 0; dt < ncclNumTypes; dt++) {
        ncclDataType_t t = (ncclDataType_t)dt;
        if ((t == ncclFloat8e4m3 || t == ncclFloat8e5m2) &&
            ncclAllReduce(&x, &x, 0, t, ncclSum, world, NULL) == ncclInvalidUsage)
            continue; /* float8 not in this braid (the coll test decides whether that is ok) */
        if (ring(world, t, 17, 0)) return 1;
    }
    static const size_t counts[] = {0, 1, 1031, 1 << 18};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        if (ring(world, ncclFloat32, counts[i], (int)(i % 2))) return 1;
    if (all_pairs(world)) return 1;
    if (extras(world)) return 1;
    CHECK(ncclSend(&x, 1, ncclInt32, g_nranks, world, NULL) == ncclInvalidArgument,
          "peer = nranks");
    printf("rank %d: p2p ok\n", g_rank);
    return 0;
}

/* NCCL takes every color but NCCL_SPLIT_NOCOLOR as a color (braid's split takes a negative one
 * as none); and a split refused on one rank (its config is not NCCL_CONFIG_INITIALIZER's), in a
 * group or not, fails there (in a group, at ncclGroupEnd too, as NCCL's ncclGroupErrCheck) and
 * at once on the peers, naming the refusal, instead of their waiting out BRAID_TIMEOUT (60 s). */
static int split_refused(ncclComm_t world)
{
    int n = g_nranks, me = g_rank, last = n - 1, x = -1;
    ncclComm_t sub = NULL, half = NULL;
    NCCLOK(ncclCommSplit(world, me % 2 ? -2 : 7, -me, &half, NULL));
    CHECK(half, "color -2 made no communicator");
    NCCLOK(ncclCommCount(half, &x));
    CHECK(x == (n - me % 2 + 1) / 2, "color %d: %d ranks", me % 2 ? -2 : 7, x);
    NCCLOK(ncclCommUserRank(half, &x));
    CHECK(x == (n - 1 - me) / 2, "color %d: rank %d (keys reverse them)", me % 2 ? -2 : 7, x);
    if (allreduce_check(half, x, (n - me % 2 + 1) / 2, 23, "color -2")) return 1;
    NCCLOK(ncclCommDestroy(half));
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    for (int grouped = 0; grouped < 2; grouped++) {
        NCCLOK(ncclCommSplit(world, 0, me, &sub, NULL));
        half = (ncclComm_t)&x; /* overwritten with NULL */
        double t0 = now_s();
        ncclResult_t r;
        if (grouped) NCCLOK(ncclGroupStart());
        r = ncclCommSplit(sub, 1, me, &half, me == last ? &bad : NULL);
        if (grouped) {
            CHECK(r == (me == last ? ncclInvalidArgument : ncclSuccess), "grouped split: %d", r);
            r = ncclGroupEnd();
        }
        double dt = now_s() - t0;
        if (me == last)
            CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "config"),
                  "the refusing rank's split (grouped %d): %d '%s'", grouped, (int)r,
                  ncclGetLastError(NULL));
        else
            CHECK(r != ncclSuccess && strstr(ncclGetLastError(NULL), "rejected") && dt < 30,
                  "a peer's split (grouped %d): %d after %.1f s '%s'", grouped, (int)r, dt,
                  ncclGetLastError(NULL));
        if (me != last) {
            /* As NCCL: a split that ran hands out its communicator, failed or not
             * (ncclCommInitRankFunc writes *newcomm when its job ends); it is in error. */
            CHECK(half && half != (ncclComm_t)&x && ncclCommCount(half, &x) != ncclSuccess,
                  "a failed split (grouped %d) was made: %p", grouped, (void *)half);
            NCCLOK(ncclCommDestroy(half));
        } else
            CHECK(half == NULL, "a refused split left *newcomm set");
        NCCLOK(ncclCommDestroy(sub));
    }
    return 0;
}

/* A group that ncclGroupEnd drops on the last rank only, for a failure braid does not refuse
 * itself (how 0: a call on a NULL communicator; 1: ncclGroupSimulateEnd with a simInfo without
 * the initializer's magic): its valid all-reduce still reaches braid, as a rejected group, so
 * that the peers' all-reduce fails naming the rejection and the last rank's next all-reduce
 * fails too, instead of pairing with the peers' grouped one (the last rank's c summed with the
 * peers' a, no error anywhere). The dropping rank is told that braid failed its communicator. */
static int dropped_group(ncclComm_t world)
{
    int n = g_nranks, me = g_rank, last = n - 1;
    for (int how = 0; how < 2; how++) {
        ncclComm_t sub = NULL;
        NCCLOK(ncclCommSplit(world, 0, me, &sub, NULL));
        float a = (float)(1 + me), b = -1, c = (float)(100 + me), d = -1;
        ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
        bad.magic = 0;
        NCCLOK(ncclGroupStart());
        NCCLOK(ncclAllReduce(&a, &b, 1, ncclFloat32, ncclSum, sub, NULL));
        if (me == last && how == 0)
            EXPECT(ncclAllReduce(&a, &b, 1, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument,
                   "comm is NULL");
        ncclResult_t r = me == last && how == 1 ? ncclGroupSimulateEnd(&bad) : ncclGroupEnd();
        char first[1024];
        snprintf(first, sizeof(first), "%s", r != ncclSuccess ? ncclGetLastError(NULL) : "");
        ncclResult_t r2 = ncclAllReduce(&c, &d, 1, ncclFloat32, ncclSum, sub, NULL);
        if (me == last) {
            CHECK(r == ncclInvalidArgument && b == -1 &&
                      strstr(first, how ? "NCCL_SIM_INFO_INITIALIZER" : "comm is NULL") &&
                      strstr(first, "; the communicator failed: "),
                  "how %d: the dropping rank's group end: %d b=%g '%s'", how, (int)r, b, first);
            CHECK(r2 != ncclSuccess, "how %d: the dropping rank's next all-reduce: d=%g", how, d);
        } else {
            const char *m = r != ncclSuccess ? first : ncclGetLastError(NULL);
            CHECK((r != ncclSuccess || r2 != ncclSuccess) && strstr(m, "rejected"),
                  "how %d: a peer's group end %d, next all-reduce %d: '%s'", how, (int)r, (int)r2,
                  m);
        }
        CHECK(r2 != ncclSuccess || d == (float)(100 * n + n * (n - 1) / 2),
              "how %d: the next all-reduce paired with another call: d=%g", how, d);
        NCCLOK(ncclCommDestroy(sub));
    }
    return 0;
}

/* A call refused on one rank only (its arguments fail the checks there): that rank gets the
 * argument error, and its peers' matching calls fail at once naming the refusal, instead of
 * waiting out the timeout or pairing with the refusing rank's next call. Each case runs on its
 * own split of world (the split fails); world goes on. */
int test_refused(ncclComm_t world)
{
    int n = g_nranks, me = g_rank, last = n - 1;
    if (n < 2) return 0;
    if (split_refused(world)) return 1;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0};
    for (int grouped = 0; grouped < 2; grouped++) {
        ncclComm_t sub = NULL;
        NCCLOK(ncclCommSplit(world, 0, me, &sub, NULL));
        ncclResult_t r;
        if (!grouped) {
            /* The refusing rank is told that braid failed its communicator (the peers did not
             * refuse the same call; NCCL's would stay usable). */
            if (me == last) {
                EXPECT(ncclAllReduce(x, y, 8, (ncclDataType_t)99, ncclSum, sub, NULL),
                       ncclInvalidArgument, "datatype=99");
                CHECK(strstr(ncclGetLastError(NULL), "; the communicator failed: "),
                      "a refusal that failed the comm: '%s'", ncclGetLastError(NULL));
            } else {
                r = ncclAllReduce(x, y, 8, ncclFloat32, ncclSum, sub, NULL);
                CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "rejected"),
                      "a peer's refused all-reduce: %d '%s'", (int)r, ncclGetLastError(NULL));
            }
        } else {
            /* A ring of sends and receives; the last rank's receive names a bad peer. */
            NCCLOK(ncclGroupStart());
            NCCLOK(ncclSend(x, 8, ncclFloat32, (me + 1) % n, sub, NULL));
            if (me == last)
                EXPECT(ncclRecv(y, 8, ncclFloat32, n + 3, sub, NULL), ncclInvalidArgument, "peer=");
            else
                NCCLOK(ncclRecv(y, 8, ncclFloat32, (me + n - 1) % n, sub, NULL));
            r = ncclGroupEnd();
            if (me == last)
                CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "peer=") &&
                          strstr(ncclGetLastError(NULL), "; the communicator failed: "),
                      "the refusing rank's group end: %d '%s'", (int)r, ncclGetLastError(NULL));
            else {
                /* A peer whose part went through (its send was buffered, its receive came
                 * from a rank that did not refuse) learns it at its next call. */
                if (r == ncclSuccess) r = ncclAllReduce(x, x, 8, ncclFloat32, ncclSum, sub, NULL);
                CHECK(r != ncclSuccess && strstr(ncclGetLastError(NULL), "rejected"),
                      "a peer's group end: %d '%s'", (int)r, ncclGetLastError(NULL));
            }
        }
        if (me == last) CHECK(y[0] == 0, "a refused call moved data (%g)", y[0]);
        NCCLOK(ncclCommDestroy(sub));
    }
    if (dropped_group(world)) return 1;
    if (allreduce_check(world, me, n, 21, "after refused calls")) return 1;
    printf("rank %d: refused ok\n", me);
    return 0;
}

/* ---- close ---------------------------------------------------------------------------------- */
typedef struct {
    ncclComm_t comm;
    float *buf;
    ncclResult_t res;
    int calls;
} looper_t;

enum { LOOP_COUNT = 1 << 15 };

static void *loop_allreduce(void *arg)
{
    looper_t *l = arg;
    while (l->res == ncclSuccess) {
        l->res = ncclAllReduce(l->buf, l->buf, LOOP_COUNT, ncclFloat, ncclSum, l->comm, NULL);
        l->calls++;
    }
    return NULL;
}

/* A thread loops all-reduces on a new communicator while this one aborts (abort = 1) or
 * destroys it: the loop must end with an error (its call in flight returns, or its next call
 * is refused), never use the freed communicator (the ASan build sees that). */
static int close_during_calls(ncclComm_t world, int abort, int round)
{
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    looper_t l = {.res = ncclSuccess};
    NCCLOK(ncclCommInitRank(&l.comm, g_nranks, id, g_rank));
    l.buf = calloc(LOOP_COUNT, sizeof(float));
    CHECK(l.buf, "calloc");
    pthread_t th;
    CHECK(pthread_create(&th, NULL, loop_allreduce, &l) == 0, "pthread_create");
    usleep(20000 + 10000 * round);
    double t0 = now_s();
    NCCLOK(abort ? ncclCommAbort(l.comm) : ncclCommDestroy(l.comm));
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    free(l.buf);
    CHECK(l.res != ncclSuccess, "the loop ended without an error");
    CHECK(dt < 10, "%s took %.1f s", abort ? "ncclCommAbort" : "ncclCommDestroy", dt);
    return 0;
}

typedef struct {
    ncclComm_t comm;
    ncclResult_t res;
    double dt; /* how long the abort took */
} aborter_t;

/* Aborts a->comm after its init started. */
static void *abort_later(void *arg)
{
    aborter_t *a = arg;
    usleep(300000);
    double t0 = now_s();
    a->res = ncclCommAbort(a->comm);
    a->dt = now_s() - t0;
    return NULL;
}

/* NCCL's abort ends a non-blocking init still running; braid's init cannot be cut short, so
 * the drop-in's abort returns at once and the init's thread frees the communicator when braid's
 * init returns. Run alone (nccl_client abort_init, without braid-run: one process), with
 * BRAID_TIMEOUT=3 and NCCL_DEBUG=INFO in its environment from the start (so no variable changes
 * while braid's threads read them): it inits communicators of 2 ranks that nobody joins (each
 * init runs until the timeout), aborts them, and waits past the timeout so that the orphaned
 * inits' threads free them; tests/mp/test_nccl.c counts their INFO lines. */
int test_abort_init(void)
{
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, 2, id, 0, &cfg);
    CHECK(r == ncclInProgress, "a non-blocking init nobody joins: %d", (int)r);
    int x; /* the queries refuse a communicator whose init runs (NCCL's ncclCommEnsureReady) */
    EXPECT(ncclCommCount(c, &x), ncclInvalidArgument, "in progress");
    EXPECT(ncclCommUserRank(c, &x), ncclInvalidArgument, "in progress");
    EXPECT(ncclCommCuDevice(c, &x), ncclInvalidArgument, "in progress");
    /* So do a collective, a split and ncclCommFinalize, at once (NCCL's ncclCommEnsureReady:
     * "Attempt to use communicator before the previous operation returned ncclSuccess"),
     * without waiting for the init (it runs until BRAID_TIMEOUT, 3 s here). */
    float f = 1;
    ncclComm_t sub = (ncclComm_t)&sub;
    double t1 = now_s();
    EXPECT(ncclAllReduce(&f, &f, 1, ncclFloat32, ncclSum, c, NULL), ncclInvalidArgument,
           "in progress");
    EXPECT(ncclCommSplit(c, 0, 0, &sub, NULL), ncclInvalidArgument, "in progress");
    CHECK(sub == NULL, "a refused split left *newcomm %p", (void *)sub);
    EXPECT(ncclCommFinalize(c), ncclInvalidArgument, "in progress");
    double dt1 = now_s() - t1;
    CHECK(dt1 < 1, "calls on a running non-blocking init took %.2f s", dt1);
    /* ncclCommDestroy is refused at once while the init runs (NCCL's ncclCommEnsureReady);
     * the communicator stays, and an abort ends it. */
    double t0 = now_s();
    EXPECT(ncclCommDestroy(c), ncclInvalidArgument, "in progress");
    double dt = now_s() - t0;
    CHECK(dt < 1, "ncclCommDestroy of a running init took %.2f s", dt);
    t0 = now_s();
    NCCLOK(ncclCommAbort(c));
    dt = now_s() - t0;
    CHECK(dt < 1, "ncclCommAbort of a running init took %.2f s", dt);
    /* A grouped blocking init runs in ncclGroupEnd's thread: another thread's abort returns
     * at once there too, and the group's end fails. */
    NCCLOK(ncclGetUniqueId(&id));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRank(&c, 2, id, 0));
    aborter_t ab = {.comm = c, .dt = -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, abort_later, &ab) == 0, "pthread_create");
    r = ncclGroupEnd();
    pthread_join(th, NULL);
    CHECK(r != ncclSuccess, "the group of an aborted init succeeded");
    CHECK(ab.res == ncclSuccess && ab.dt >= 0 && ab.dt < 1,
          "ncclCommAbort of a grouped init running: %d after %.2f s", (int)ab.res, ab.dt);
    /* Past BRAID_TIMEOUT (3 s): the inits failed and their threads freed the communicators. */
    usleep(4500000);
    printf("rank %d: abort_init ok\n", g_rank);
    return 0;
}

/* Run alone with NCCL_COMM_BLOCKING=0 (nccl_client env_blocking under braid-run): NCCL's
 * envConfigOverride makes every communicator non-blocking, a config's blocking = 1 included. */
int test_env_blocking(void)
{
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id)); /* NCCL_COMM_ID: the same on every rank */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    ncclComm_t c = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&c, g_nranks, id, g_rank, &cfg), st = r;
    CHECK(r == ncclInProgress, "an init under NCCL_COMM_BLOCKING=0 returned %d", (int)r);
    for (double t0 = now_s(); st == ncclInProgress && now_s() - t0 < 60;)
        NCCLOK(ncclCommGetAsyncError(c, &st));
    CHECK(st == ncclSuccess, "init state %d", (int)st);
    if (allreduce_check(c, g_rank, g_nranks, 29, "NCCL_COMM_BLOCKING=0")) return 1;
    NCCLOK(ncclCommDestroy(c));
    printf("rank %d: nccl client passed\n", g_rank);
    return 0;
}

int test_close(ncclComm_t world)
{
    for (int round = 0; round < 3; round++)
        for (int abort = 1; abort >= 0; abort--)
            if (close_during_calls(world, abort, round)) return 1;
    printf("rank %d: close ok\n", g_rank);
    return 0;
}
