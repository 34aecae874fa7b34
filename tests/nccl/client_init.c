/* Communicator inits and splits in groups, against NCCL 2.26.6's rules: a group runs its inits
 * and splits together (NCCL's async jobs, each on its own thread), then its operations; a
 * grouped split's handle is written when it ran, at ncclGroupEnd; blocking and non-blocking
 * communicators cannot share a group; and ncclConfig_t's fields are checked as NCCL's
 * parseCommConfig checks them. */
#define _GNU_SOURCE
#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rank 0 groups an init of a new communicator, a split of world and an all-reduce on world;
 * the other ranks make the same calls one by one, blocking. NCCL runs the group's init and
 * split concurrently, so rank 0's split meets the peers' once their init returned (with the
 * init run after the split, or the split after the init, the two sides wait for each other
 * until BRAID_TIMEOUT); and the all-reduce on world, a ready communicator, runs after them. */
static int inits_and_splits(ncclComm_t world)
{
    int n = g_nranks, me = g_rank;
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    size_t count = 333;
    int32_t *a = malloc(count * 4);
    CHECK(a, "malloc");
    fill(a, ncclInt32, ncclSum, me, n, 0, count, 51);
    ncclComm_t x = NULL, sp = NULL;
    double t0 = now_s();
    if (me == 0) {
        NCCLOK(ncclGroupStart());
        NCCLOK(ncclCommInitRank(&x, n, id, 0));
        sp = (ncclComm_t)&sp;
        NCCLOK(ncclCommSplit(world, 0, n - me, &sp, NULL));
        /* As NCCL's ncclCommSplit: *newcomm is NULL until the split ran, at ncclGroupEnd. */
        CHECK(sp == NULL, "a grouped split's handle before its ncclGroupEnd: %p", (void *)sp);
        NCCLOK(ncclAllReduce(a, a, count, ncclInt32, ncclSum, world, NULL));
        /* A communicator with an operation recorded, and one whose init waits for the group's
         * end, report ncclSuccess until then (NCCL sets ncclInProgress at ncclGroupEnd, for
         * non-blocking communicators only). */
        ncclResult_t st = ncclInProgress;
        NCCLOK(ncclCommGetAsyncError(world, &st));
        CHECK(st == ncclSuccess, "world's async error %d in an open group", (int)st);
        st = ncclInProgress;
        NCCLOK(ncclCommGetAsyncError(x, &st));
        CHECK(st == ncclSuccess, "a grouped init's async error %d before its end", (int)st);
        NCCLOK(ncclGroupEnd());
    } else {
        NCCLOK(ncclCommInitRank(&x, n, id, me));
        NCCLOK(ncclCommSplit(world, 0, n - me, &sp, NULL));
        NCCLOK(ncclAllReduce(a, a, count, ncclInt32, ncclSum, world, NULL));
    }
    double dt = now_s() - t0;
    CHECK(dt < 30, "the init, split and all-reduce took %.1f s", dt);
    CHECK(sp != NULL, "no communicator from the split");
    CHECK(!check_reduced(a, ncclInt32, ncclSum, n, 0, count, 51, 0, "grouped with inits"),
          "the all-reduce grouped with an init and a split");
    free(a);
    int sr = -1;
    NCCLOK(ncclCommUserRank(sp, &sr));
    CHECK(sr == n - 1 - me, "split rank %d (keys reverse the ranks)", sr);
    if (allreduce_check(x, me, n, 52, "init grouped with a split")) return 1;
    if (allreduce_check(sp, sr, n, 53, "split grouped with an init")) return 1;
    NCCLOK(ncclCommDestroy(x));
    NCCLOK(ncclCommDestroy(sp));
    return 0;
}

/* NCCL's ncclAsyncLaunch: an init or split whose communicator's blocking differs from the
 * group's (set by its first init, split or operation; a split counts its parent's) fails with
 * ncclInvalidArgument, its handle NULL, and so does the group's end. Every rank makes the same
 * calls, so nothing runs anywhere (the refused split is refused to braid on every rank) and
 * world stays usable. */
static int mixed_blocking(ncclComm_t world)
{
    int me = g_rank, n = g_nranks;
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
    nb.blocking = 0;
    ncclComm_t a = NULL, b = (ncclComm_t)&b, sp = (ncclComm_t)&sp;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommInitRankConfig(&a, n, id, me, &nb));
    EXPECT(ncclCommInitRank(&b, n, id, me), ncclInvalidArgument, "same group");
    CHECK(b == NULL, "a refused init left *comm %p", (void *)b);
    EXPECT(ncclCommSplit(world, 0, me, &sp, NULL), ncclInvalidArgument, "same group");
    CHECK(sp == NULL, "a refused split left *newcomm %p", (void *)sp);
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "same group");
    int k = 0;
    CHECK(ncclCommCount(a, &k) != ncclSuccess, "an init of a failed group ran");
    NCCLOK(ncclCommDestroy(a));
    float f[4] = {1, 2, 3, 4};
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclAllReduce(f, f, 4, ncclFloat32, ncclSum, world, NULL));
    a = (ncclComm_t)&a;
    EXPECT(ncclCommInitRankConfig(&a, n, id, me, &nb), ncclInvalidArgument, "same group");
    CHECK(a == NULL, "a refused init left *comm %p", (void *)a);
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, "same group");
    CHECK(f[0] == 1, "a failed group ran its all-reduce (%g)", f[0]);
    return allreduce_check(world, me, n, 54, "after groups mixing blocking modes");
}

/* ncclConfig_t as NCCL 2.26.6's parseCommConfig checks it: cgaClusterSize not negative,
 * minCTAs and maxCTAs positive with minCTAs <= maxCTAs (compared as they are: a minCTAs set
 * alone is above maxCTAs' NCCL_CONFIG_UNDEF_INT), splitShare 0 or 1, each ncclInvalidArgument
 * with *comm NULL; a config older than 2.17 has no cgaClusterSize, minCTAs or maxCTAs (they are
 * not read). Then a split of world refused for its config on every rank (world stays usable). */
static int config_checks(ncclComm_t world)
{
    enum { U = NCCL_CONFIG_UNDEF_INT };
    static const struct {
        int cga, minc, maxc, share;
        const char *word;
    } bad[] = {{-1, U, U, U, "cgaClusterSize"},
               {U, 0, U, U, "CTAs"},
               {U, U, -2, U, "CTAs"},
               {U, 8, 4, U, "CTAs"},
               {U, 4, U, U, "CTAs"},
               {U, U, U, 2, "splitShare"},
               {U, U, U, -1, "splitShare"}};
    ncclUniqueId id;
    NCCLOK(ncclGetUniqueId(&id));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.cgaClusterSize = bad[i].cga;
        cfg.minCTAs = bad[i].minc;
        cfg.maxCTAs = bad[i].maxc;
        cfg.splitShare = bad[i].share;
        ncclComm_t c = (ncclComm_t)&c;
        EXPECT(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument, bad[i].word);
        CHECK(c == NULL, "config %zu: *comm %p", i, (void *)c);
    }
    ncclConfig_t ok = NCCL_CONFIG_INITIALIZER;
    ok.cgaClusterSize = 0;
    ok.minCTAs = 2;
    ok.maxCTAs = 2;
    ok.splitShare = 1;
    ncclComm_t c = NULL;
    NCCLOK(ncclCommInitRankConfig(&c, 1, id, 0, &ok));
    NCCLOK(ncclCommDestroy(c));
    ncclConfig_t old = NCCL_CONFIG_INITIALIZER; /* 2.16: the CTA fields are not read */
    old.version = NCCL_VERSION(2, 16, 0);
    old.cgaClusterSize = -1;
    old.minCTAs = 8;
    old.maxCTAs = 4;
    NCCLOK(ncclGetUniqueId(&id));
    NCCLOK(ncclCommInitRankConfig(&c, 1, id, 0, &old));
    NCCLOK(ncclCommDestroy(c));
    ncclConfig_t share = NCCL_CONFIG_INITIALIZER;
    share.splitShare = 3;
    ncclComm_t sp = (ncclComm_t)&sp;
    EXPECT(ncclCommSplit(world, 0, g_rank, &sp, &share), ncclInvalidArgument, "splitShare");
    CHECK(sp == NULL, "a refused split left *newcomm %p", (void *)sp);
    return allreduce_check(world, g_rank, g_nranks, 55, "after refused configs");
}

/* Waits, bounded, for a non-blocking communicator's init or split to finish; 0 when it did. */
static int wait_ready(ncclComm_t c, const char *what)
{
    ncclResult_t st = ncclInProgress;
    for (double t0 = now_s(); st == ncclInProgress && now_s() - t0 < 60;) {
        NCCLOK(ncclCommGetAsyncError(c, &st));
        if (st == ncclInProgress) usleep(200);
    }
    CHECK(st == ncclSuccess, "%s: async error %d", what, (int)st);
    return 0;
}

/* ncclCommInitRankScalable as NCCL's ncclCommInitRankDev: nId ids every rank holds, nId in
 * [1, nranks] (ncclInvalidArgument otherwise, failing an open group's end as ncclGroupErrCheck);
 * and a non-blocking group (its split's parent is non-blocking) returns ncclInProgress at its
 * end, as NCCL's, even with no plain init in it. */
static int scalable_and_nonblocking_split(ncclComm_t world)
{
    int me = g_rank, n = g_nranks;
    ncclUniqueId ids[2];
    if (shared_id(world, &ids[0]) || shared_id(world, &ids[1])) return 1;
    int nid = n > 1 ? 2 : 1;
    ncclComm_t c = NULL;
    ncclResult_t r;
    NCCLOK(ncclCommInitRankScalable(&c, n, me, nid, ids, NULL));
    if (allreduce_check(c, me, n, 56, "scalable init")) return 1;
    NCCLOK(ncclCommDestroy(c));
    EXPECT(ncclCommInitRankScalable(&c, n, me, 0, ids, NULL), ncclInvalidArgument, "nId");
    EXPECT(ncclCommInitRankScalable(&c, n, me, n + 1, ids, NULL), ncclInvalidArgument, "nId");
    EXPECT(ncclCommInitRankScalable(&c, n, me, 1, NULL, NULL), ncclInvalidArgument, "commIds");
    NCCLOK(ncclGroupStart());
    EXPECT(ncclCommInitRankScalable(&c, n, me, n + 1, ids, NULL), ncclInvalidArgument, "nId");
    r = ncclGroupEnd();
    CHECK(r == ncclInvalidArgument, "a group with a refused scalable init ended with %d", (int)r);
    ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
    nb.blocking = 0;
    ncclComm_t p = NULL, sp = NULL;
    ncclUniqueId id;
    if (shared_id(world, &id)) return 1;
    r = ncclCommInitRankConfig(&p, n, id, me, &nb);
    CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init: %d", (int)r);
    if (wait_ready(p, "non-blocking parent")) return 1;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommSplit(p, 0, me, &sp, NULL));
    r = ncclGroupEnd();
    CHECK(r == ncclInProgress, "a non-blocking group of a split ended with %d", (int)r);
    CHECK(sp != NULL, "no communicator from the non-blocking group's split");
    if (wait_ready(sp, "non-blocking split")) return 1;
    if (allreduce_check(sp, me, n, 57, "split in a non-blocking group")) return 1;
    NCCLOK(ncclCommDestroy(sp));
    NCCLOK(ncclCommDestroy(p));
    /* The group's mode is its first init's, split's (its parent's) or operation's, not the new
     * communicator's own: a non-blocking split of blocking world with an all-reduce on world is
     * a blocking group, which ncclGroupSimulateEnd simulates (the all-reduce is not run; braid
     * has no estimate: ncclInvalidUsage); the split runs. */
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    float f[4] = {1, 2, 3, 4};
    sp = NULL;
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclCommSplit(world, 0, me, &sp, &nb));
    NCCLOK(ncclAllReduce(f, f, 4, ncclFloat32, ncclSum, world, NULL));
    r = ncclGroupSimulateEnd(&si);
    CHECK(r == ncclInvalidUsage, "a simulated blocking group with a collective ended with %d",
          (int)r);
    CHECK(f[0] == 1, "a simulated group ran its all-reduce (%g)", f[0]);
    CHECK(sp != NULL, "no communicator from the simulated group's split");
    if (wait_ready(sp, "split in a simulated group")) return 1;
    NCCLOK(ncclCommDestroy(sp));
    return allreduce_check(world, me, n, 58, "after a simulated group");
}

int test_inits(ncclComm_t world)
{
    if (inits_and_splits(world) || mixed_blocking(world) || config_checks(world) ||
        scalable_and_nonblocking_split(world))
        return 1;
    printf("rank %d: inits ok\n", g_rank);
    return 0;
}
