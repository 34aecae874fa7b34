/* Ranks that disagree on a call: every kind ends in BRAID_ERR_MISMATCH on every rank, naming
 * both calls, within a second (never a timeout, never success everywhere), on shm and tcp,
 * with 2 and 3 ranks. The last rank (rank n-1) is the odd one out.
 *
 * A rank whose own part of the mismatched call was complete (all it had to receive came from
 * ranks that agreed with it) may return success from it: its next call (a barrier here) must
 * then fail with the mismatch. A rank that rejected its call (bad argument) gets
 * BRAID_ERR_INVALID_ARG from it and the mismatch from its next call. */
#include "mp.h"

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef enum {
    BCAST_ROOTS,   /* broadcast: rank n-1 names root 1, the others root 0 */
    REDUCE_ROOTS,  /* reduce: the same */
    COUNT_ZERO,    /* all-reduce: rank n-1 passes count 0, the others count > 0 */
    BCAST_ZERO,    /* broadcast from rank 0: rank n-1 passes count 0 */
    SPLIT,         /* rank n-1 calls braid_comm_split, the others an all-reduce */
    SPLIT_MOST,    /* the others call braid_comm_split, rank n-1 an all-reduce */
    REJECTED,      /* rank n-1's all-reduce has a bad op, the others' is valid */
    REJECTED_ROOT, /* rank n-1's broadcast has root = nranks, the others' root 0 */
    REJECTED_SPLIT /* rank n-1's braid_comm_split has newcomm_p NULL, the others' is valid */
} kind_t;

typedef struct {
    kind_t kind;
    size_t count;
    const char *word1, *word2; /* the final message names both calls with these */
} case_t;

static braid_result_t odd_call(const case_t *c, braid_comm_t comm, int rank, int n, float *buf)
{
    int odd = rank == n - 1;
    switch (c->kind) {
    case BCAST_ROOTS:
        return braid_broadcast(buf, buf, c->count, BRAID_FLOAT32, odd ? 1 : 0, comm);
    case REDUCE_ROOTS:
        return braid_reduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, odd ? 1 : 0, comm);
    case COUNT_ZERO:
        return braid_allreduce(buf, buf, odd ? 0 : c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case BCAST_ZERO:
        return braid_broadcast(buf, buf, odd ? 0 : c->count, BRAID_FLOAT32, 0, comm);
    case SPLIT:
    case SPLIT_MOST:
        if (odd == (c->kind == SPLIT)) {
            braid_comm_t nc = NULL;
            braid_result_t r = braid_comm_split(comm, 0, rank, &nc);
            if (nc) braid_comm_destroy(nc);
            return r;
        }
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32, BRAID_SUM, comm);
    case REJECTED:
        return braid_allreduce(buf, buf, c->count, BRAID_FLOAT32,
                               odd ? (braid_redop_t)99 : BRAID_SUM, comm);
    case REJECTED_ROOT:
        return braid_broadcast(buf, buf, c->count, BRAID_FLOAT32, odd ? n : 0, comm);
    case REJECTED_SPLIT: {
        braid_comm_t nc = NULL;
        braid_result_t r = braid_comm_split(comm, 0, rank, odd ? NULL : &nc);
        if (nc) braid_comm_destroy(nc);
        return r;
    }
    }
    return BRAID_ERR_INTERNAL;
}

static int run_case(braid_comm_t comm, int rank, int n, void *arg)
{
    const case_t *c = arg;
    float *buf = calloc(c->count ? c->count : 1, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t i = 0; i < c->count; i++)
        buf[i] = (float)(rank * 3 + (int)(i % 11));
    MP_OK(rank, braid_barrier(comm)); /* start together: the time bound is the detection's */
    double t0 = now_s();
    braid_result_t r = odd_call(c, comm, rank, n, buf);
    braid_result_t first = r;
    char first_msg[600];
    snprintf(first_msg, sizeof(first_msg), "%s", braid_last_error());
    int rejecter = (c->kind == REJECTED || c->kind == REJECTED_ROOT || c->kind == REJECTED_SPLIT) &&
                   rank == n - 1;
    if (rejecter)
        MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "the rejected call returned %s: %s",
                 braid_strerror(r), first_msg);
    if (r == BRAID_SUCCESS || rejecter) r = braid_barrier(comm);
    double el = now_s() - t0;
    const char *m = braid_last_error();
    free(buf);
    fprintf(stderr, "rank %d/%d: first %s, then %s: %s (%.3f s)\n", rank, n, braid_strerror(first),
            braid_strerror(r), m, el);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "ended in %s: %s", braid_strerror(r), m);
    MP_CHECK(rank, strstr(m, c->word1) && strstr(m, c->word2), "message lacks '%s' / '%s': %s",
             c->word1, c->word2, m);
    MP_CHECK(rank, el < 1.0, "took %.2f s", el);
    return 0;
}

static void run_all(const case_t *c)
{
    static const char *transports[] = {"shm", "tcp"};
    setenv("BRAID_TIMEOUT", "20", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        for (int n = 2; n <= 3; n++)
            cr_expect_eq(mp_run(n, run_case, (void *)c, 60), 0, "transport %s, %d ranks",
                         transports[t], n);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_TIMEOUT");
}

TestSuite(mismatch, .timeout = 240);

Test(mismatch, broadcast_with_different_roots_small)
{
    case_t c = {BCAST_ROOTS, 5, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, broadcast_with_different_roots_large)
{
    case_t c = {BCAST_ROOTS, (size_t)1 << 20, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, reduce_with_different_roots_small)
{
    case_t c = {REDUCE_ROOTS, 5, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, reduce_with_different_roots_large)
{
    case_t c = {REDUCE_ROOTS, (size_t)1 << 20, "root 0", "root 1"};
    run_all(&c);
}

Test(mismatch, count_zero_against_count_nonzero)
{
    case_t c = {COUNT_ZERO, 7, "count 0", "count 7"};
    run_all(&c);
    case_t big = {COUNT_ZERO, (size_t)1 << 20, "count 0", "count 1048576"};
    run_all(&big);
}

Test(mismatch, broadcast_count_zero_against_count_nonzero)
{
    case_t c = {BCAST_ZERO, 9, "count 0", "count 9"};
    run_all(&c);
}

Test(mismatch, split_against_a_collective)
{
    case_t c = {SPLIT, 9, "comm_split", "allreduce"};
    run_all(&c);
    case_t big = {SPLIT, (size_t)1 << 20, "comm_split", "allreduce"};
    run_all(&big);
    case_t most = {SPLIT_MOST, 9, "comm_split", "allreduce"};
    run_all(&most);
}

Test(mismatch, call_rejected_on_one_rank_only)
{
    case_t c = {REJECTED, 9, "rejected", "op 99"};
    run_all(&c);
    case_t root = {REJECTED_ROOT, 9, "rejected", "root 0"};
    run_all(&root);
}

Test(mismatch, split_rejected_on_one_rank_only)
{
    case_t c = {REJECTED_SPLIT, 0, "rejected its comm_split", "called comm_split"};
    run_all(&c);
}
