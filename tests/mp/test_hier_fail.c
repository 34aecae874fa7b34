/* Hierarchical calls that go wrong, as real processes on faked hosts (see test_algos.c): a
 * rank that rejects its call, calls it with another count (and so runs the ring) or splits the
 * communicator while the others run hier must fail every rank at once with a mismatch naming
 * the calls, not leave them waiting out the timeout in a sub-communicator or the bootstrap; a
 * first use whose sub-communicators fail on some ranks fails every rank alike and at once.
 * Also: the sub-communicators take the parent's settings, not the environment's; the scratch
 * memory goes with the communicator (LeakSanitizer, in ASan builds) and large scratch with its
 * call; uneven hosts make inter-host sub-communicators only for the local indices hier uses. */
#include "algos/algo.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The calls' timeout: a rank that waits it out fails the prompt-failure checks (PROMPT_S). */
#define LONG_TIMEOUT_S 30.0
#define PROMPT_S 8.0

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static braid_comm_t hier_comm(braid_comm_t comm, int rank)
{
    static const int host[] = {0, 0, 1, 1};
    braid_comm_t c = mp_fake_host_comm(comm, rank, host[rank], "hier");
    if (c) braid_comm_set_timeout(c, LONG_TIMEOUT_S);
    return c;
}

static int hier_ready(braid_comm_t c)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st && st->hier_ready;
}

enum { ODD_REJECT, ODD_COUNT, ODD_SPLIT };

/* Rank 3 makes the odd call (mode), the others a hier all-reduce: every rank's call fails
 * within PROMPT_S; the others' with BRAID_ERR_MISMATCH, and the message of at least one rank
 * (the one that found it) names both calls. warm: a hier all-reduce first (the
 * sub-communicators exist), else the odd call meets the others' first use. */
static int odd_call(braid_comm_t comm, int rank, int n, int mode, int warm)
{
    braid_comm_t c = hier_comm(comm, rank);
    MP_CHECK(rank, c != NULL, "no communicator");
    size_t N = 1 << 14;
    float *buf = malloc(N * sizeof(float));
    MP_CHECK(rank, buf != NULL, "out of memory");
    data_fill(buf, BRAID_FLOAT32, BRAID_SUM, rank, 0, N, 5);
    if (warm) {
        MP_OK(rank, braid_allreduce(buf, buf, N, BRAID_FLOAT32, BRAID_SUM, c));
        MP_CHECK(rank, hier_ready(c), "hier did not run");
    }
    int odd = rank == n - 1;
    braid_comm_t nc = NULL;
    double t0 = now_s();
    braid_result_t r;
    if (odd && mode == ODD_REJECT)
        r = braid_allreduce(buf, buf, N, BRAID_FLOAT32, (braid_redop_t)99, c);
    else if (odd && mode == ODD_COUNT)
        r = braid_allreduce(buf, buf, 1, BRAID_FLOAT32, BRAID_SUM, c); /* below L: the ring */
    else if (odd)
        r = braid_comm_split(c, 0, rank, &nc);
    else
        r = braid_allreduce(buf, buf, N, BRAID_FLOAT32, BRAID_SUM, c);
    double el = now_s() - t0;
    const char *msg = braid_last_error();
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, braid_strerror(r), el, msg);
    MP_CHECK(rank, r != BRAID_SUCCESS && nc == NULL, "the odd call succeeded");
    MP_CHECK(rank, el < PROMPT_S, "the call failed only after %.1f s: %s", el, msg);
    if (odd && mode == ODD_REJECT)
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "the rejecting rank got %s", braid_strerror(r));
    else
        MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "got %s: %s", braid_strerror(r), msg);
    /* Some rank names both calls: the odd one and the all-reduce. */
    const char *odd_words = mode == ODD_REJECT  ? "rank 3 rejected its allreduce"
                            : mode == ODD_COUNT ? "allreduce #"
                                                : "comm_split #";
    int names = strstr(msg, odd_words) && strstr(msg, "(count 16384") &&
                (mode != ODD_COUNT || strstr(msg, "(count 1,"));
    int32_t any = names, all_names = 0;
    MP_OK(rank, braid_allreduce(&any, &all_names, 1, BRAID_INT32, BRAID_MAX, comm));
    MP_CHECK(rank, all_names, "no rank's message names both calls (mine: %s)", msg);
    free(buf);
    braid_comm_destroy(c);
    return 0;
}

static int reject_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    return odd_call(comm, rank, n, ODD_REJECT, *(int *)arg);
}

static int count_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    return odd_call(comm, rank, n, ODD_COUNT, *(int *)arg);
}

static int split_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    return odd_call(comm, rank, n, ODD_SPLIT, *(int *)arg);
}

/* Ranks 2 and 3 (host 1) change their environment after the parent's init: a shared setting
 * (BRAID_ALGO, BRAID_NSLOTS: the sub-communicators take the parent's) changes nothing; one
 * that each rank reads for itself and that is invalid (BRAID_WORKER_RT) fails their
 * sub-communicators' init, and then every rank's call, at once and naming the cause. */
static int env_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    int bad = *(int *)arg;
    braid_comm_t c = hier_comm(comm, rank);
    MP_CHECK(rank, c != NULL, "no communicator");
    if (rank >= 2) {
        setenv("BRAID_ALGO", "bogus", 1);
        setenv("BRAID_NSLOTS", "1", 1);
        if (bad) setenv("BRAID_WORKER_RT", "100", 1);
    }
    size_t N = 4099;
    float *buf = malloc(N * sizeof(float));
    MP_CHECK(rank, buf != NULL, "out of memory");
    data_fill(buf, BRAID_FLOAT32, BRAID_SUM, rank, 0, N, 9);
    double t0 = now_s();
    braid_result_t r = braid_allreduce(buf, buf, N, BRAID_FLOAT32, BRAID_SUM, c);
    double el = now_s() - t0;
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", braid_last_error());
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_NSLOTS");
    unsetenv("BRAID_WORKER_RT");
    /* the ranks whose call failed first stay (their processes end the bootstrap connections) */
    MP_OK(rank, braid_barrier(comm));
    if (!bad) {
        MP_CHECK(rank, r == BRAID_SUCCESS, "got %s: %s", braid_strerror(r), msg);
        MP_CHECK(rank, hier_ready(c), "hier did not run");
        MP_CHECK(rank,
                 !data_check_reduced(buf, BRAID_FLOAT32, BRAID_SUM, n, 0, N, 9, "hier inherit"),
                 "wrong sum");
    } else {
        MP_CHECK(rank, r != BRAID_SUCCESS, "the call succeeded");
        MP_CHECK(rank, el < PROMPT_S, "the call failed only after %.1f s: %s", el, msg);
        MP_CHECK(rank, strstr(msg, "BRAID_WORKER_RT=100"), "message: %s", msg);
        if (rank < 2) MP_CHECK(rank, strstr(msg, "rank 2 could not make"), "message: %s", msg);
        braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
        MP_CHECK(rank, !st->intra && !st->inter && !st->hier_ready, "sub-communicators kept");
    }
    free(buf);
    braid_comm_destroy(c);
    return 0;
}

/* The scratch memory of hier reduce-scatter: a small one is kept for the next call and freed
 * with the communicator (LeakSanitizer finds it otherwise), a large one goes with its call. */
static int scratch_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    for (int k = 0; k < 2; k++) {
        braid_comm_t c = hier_comm(comm, rank);
        MP_CHECK(rank, c != NULL, "no communicator");
        size_t N = k ? (size_t)1 << 17 : 1000; /* n x N floats: 2 MiB, or 16 KB */
        float *in = malloc((size_t)n * N * sizeof(float)), *out = malloc(N * sizeof(float));
        MP_CHECK(rank, in && out, "out of memory");
        data_fill(in, BRAID_FLOAT32, BRAID_SUM, rank, 0, (size_t)n * N, 11);
        MP_OK(rank, braid_reduce_scatter(in, out, N, BRAID_FLOAT32, BRAID_SUM, c));
        MP_CHECK(rank,
                 !data_check_reduced(out, BRAID_FLOAT32, BRAID_SUM, n, (size_t)rank * N, N, 11,
                                     "hier rs"),
                 "wrong reduce-scatter");
        braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
        MP_CHECK(rank, st->runs[BRAID_ALGO_HIER] == 1, "hier did not run");
        MP_CHECK(rank, (st->scratch != NULL) == !k, "scratch %p kept after %zu B", st->scratch,
                 (size_t)n * N * sizeof(float));
        free(in);
        free(out);
        MP_OK(rank, braid_comm_destroy(c));
    }
    return 0; /* the harness checks this rank for leaks after destroying comm */
}

/* Hosts of 3 and 1 ranks: only local index 0 has an inter-host sub-communicator. */
static int uneven_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    static const int host[] = {0, 0, 0, 1};
    braid_comm_t c = mp_fake_host_comm(comm, rank, host[rank], "hier");
    MP_CHECK(rank, c != NULL, "no communicator");
    int32_t x = rank == 1 ? 42 : 0, y = -1;
    MP_OK(rank, braid_broadcast(&x, &y, 1, BRAID_INT32, 1, c));
    MP_CHECK(rank, y == 42, "broadcast gave %d", y);
    MP_OK(rank, braid_reduce(&x, rank == 2 ? &y : NULL, 1, BRAID_INT32, BRAID_SUM, 2, c));
    MP_CHECK(rank, rank != 2 || y == 42, "reduce gave %d", y);
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    MP_CHECK(rank, st->hier_ready && st->runs[BRAID_ALGO_HIER] == 2, "hier did not run");
    int lr = st->topo.local_rank[rank];
    MP_CHECK(rank, (st->inter != NULL) == (lr == 0), "local rank %d: inter-host comm %p", lr,
             (void *)st->inter);
    (void)n;
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

TestSuite(hier_fail, .timeout = 120);

static int warm = 1, cold = 0;

Test(hier_fail, rejected_call_fails_every_rank_promptly)
{
    cr_assert_eq(mp_run(4, reject_fn, &warm, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, other_count_on_the_ring_fails_every_rank_promptly)
{
    cr_assert_eq(mp_run(4, count_fn, &warm, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, rejected_first_use_fails_every_rank_promptly)
{
    cr_assert_eq(mp_run(4, reject_fn, &cold, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, split_against_first_use_fails_every_rank_promptly)
{
    cr_assert_eq(mp_run(4, split_fn, &cold, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, split_against_hier_call_fails_every_rank_promptly)
{
    cr_assert_eq(mp_run(4, split_fn, &warm, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, sub_comms_take_the_parents_settings)
{
    int bad = 0;
    cr_assert_eq(mp_run(4, env_fn, &bad, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, setup_failure_on_one_host_fails_every_rank_promptly)
{
    int bad = 1;
    cr_assert_eq(mp_run(4, env_fn, &bad, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, scratch_freed_with_comm_and_large_call)
{
    cr_assert_eq(mp_run(4, scratch_fn, NULL, 60), 0, "some rank failed (see stderr)");
}

Test(hier_fail, uneven_hosts_inter_comm_only_where_used)
{
    cr_assert_eq(mp_run(4, uneven_fn, NULL, 60), 0, "some rank failed (see stderr)");
}
