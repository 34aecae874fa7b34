/* Communicator inits and splits in groups, against NCCL 2.26.6's rules: a group runs its inits
 * and splits together (NCCL's async jobs, each on its own thread), then its operations; a
 * grouped split's handle is written when it ran, at ncclGroupEnd; blocking and non-blocking
 * communicators cannot share a group; and ncclConfig_t's fields are checked as NCCL's
 * parseCommConfig checks them. */
#define _GNU_SOURCE
#include "client.h"

#include <stdlib.h>
#include <string.h>

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

int test_inits(ncclComm_t world)
{
    if (inits_and_splits(world)) return 1;
    printf("rank %d: inits ok\n", g_rank);
    return 0;
}
