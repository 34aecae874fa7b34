/* braid_wait runs queued collectives itself (src/core/worker.c: the waiting thread takes the
 * host collectives at the head of the queue while nobody runs one), as real processes: many
 * braid_iallreduce calls of mixed sizes and dtypes waited for in reverse order, from two
 * threads at once, with blocking calls and point-to-point i-forms between them (only the worker
 * runs those), each result checked against the reference (tests/common/data.c), and the
 * waits must have run some (the communicator's count, comm.h); a successful wait leaves the
 * caller's last error message alone. */
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { NREQ = 16 };

static const size_t counts[NREQ] = {1,    7,     64,     101, 1000, 4099, 65537, 3,
                                    8192, 12289, 250007, 0,   31,   5,    2048,  77};

static braid_datatype_t dtype_of(int k)
{
    static const braid_datatype_t d[] = {BRAID_FLOAT32, BRAID_INT32, BRAID_FLOAT64, BRAID_BFLOAT16,
                                         BRAID_INT8};
    return d[k % 5];
}

typedef struct {
    braid_request_t *reqs;
    int from, to; /* waits reqs[to - 1] down to reqs[from] */
    braid_result_t res;
    pthread_barrier_t *start; /* both waiters start at once (NULL: one waiter) */
} waiter_t;

static void *wait_some(void *arg)
{
    waiter_t *w = arg;
    if (w->start) pthread_barrier_wait(w->start);
    w->res = BRAID_SUCCESS;
    for (int k = w->to - 1; k >= w->from && w->res == BRAID_SUCCESS; k--)
        w->res = braid_wait(w->reqs[k]);
    return NULL;
}

static int check_all(int rank, int n, void **bufs)
{
    for (int k = 0; k < NREQ; k++) {
        char what[32];
        snprintf(what, sizeof(what), "request %d", k);
        MP_CHECK(rank,
                 !data_check_reduced(bufs[k], dtype_of(k), BRAID_SUM, n, 0, counts[k], k, what),
                 "request %d: wrong result", k);
    }
    return 0;
}

static int many_iforms(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    void *bufs[NREQ];
    braid_request_t reqs[NREQ];
    const struct braid_comm *c = (const struct braid_comm *)comm;
    uint64_t helped0 = c->q_helped;
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < NREQ; k++) {
            bufs[k] = data_xmalloc(counts[k] * 8);
            data_fill(bufs[k], dtype_of(k), BRAID_SUM, rank, 0, counts[k], k);
        }
        int32_t ring_in[8], ring_out[8] = {0}, blk[5];
        for (int i = 0; i < 8; i++)
            ring_in[i] = rank * 100 + i;
        braid_request_t sreq = NULL, rreq = NULL;
        for (int k = 0; k < NREQ; k++) {
            MP_OK(rank, braid_iallreduce(bufs[k], bufs[k], counts[k], dtype_of(k), BRAID_SUM, comm,
                                         &reqs[k]));
            if (k == 5 && round == 2) { /* point-to-point in the queue: the worker's to run */
                MP_OK(rank, braid_isend(ring_in, 8, BRAID_INT32, next, comm, &sreq));
                MP_OK(rank, braid_irecv(ring_out, 8, BRAID_INT32, prev, comm, &rreq));
            }
        }
        if (round == 0) { /* one thread, last request first */
            waiter_t w = {reqs, 0, NREQ, 0, NULL};
            wait_some(&w);
            MP_OK(rank, w.res);
        } else { /* two threads at once, each from its last */
            pthread_barrier_t start;
            pthread_barrier_init(&start, NULL, 2);
            waiter_t a = {reqs, 0, NREQ / 2, 0, &start}, b = {reqs, NREQ / 2, NREQ, 0, &start};
            pthread_t t;
            MP_CHECK(rank, pthread_create(&t, NULL, wait_some, &b) == 0, "pthread_create");
            wait_some(&a);
            pthread_join(t, NULL);
            pthread_barrier_destroy(&start);
            MP_OK(rank, a.res);
            MP_OK(rank, b.res);
        }
        /* a blocking call after them */
        for (int i = 0; i < 5; i++)
            blk[i] = rank + i;
        MP_OK(rank, braid_allreduce(blk, blk, 5, BRAID_INT32, BRAID_MAX, comm));
        for (int i = 0; i < 5; i++)
            MP_CHECK(rank, blk[i] == n - 1 + i, "blocking allreduce: %d", blk[i]);
        if (sreq) {
            MP_OK(rank, braid_wait(rreq));
            MP_OK(rank, braid_wait(sreq));
            for (int i = 0; i < 8; i++)
                MP_CHECK(rank, ring_out[i] == prev * 100 + i, "irecv [%d] = %d", i, ring_out[i]);
        }
        if (check_all(rank, n, bufs)) return 1;
        for (int k = 0; k < NREQ; k++)
            free(bufs[k]);
    }
    /* the waits ran some of them (3 x 16 requests: the worker takes only what it finds) */
    MP_CHECK(rank, c->q_helped > helped0, "no request was run by a waiting thread");
    return 0;
}

Test(iform_wait, many_iforms_waited_in_any_order_from_two_threads, .timeout = 180)
{
    for (int n = 1; n <= 4; n++)
        cr_expect_eq(mp_run(n, many_iforms, NULL, 90), 0, "n=%d (see stderr)", n);
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, many_iforms, NULL, 90), 0, "tcp, n=3 (see stderr)");
}

/* A successful wait leaves the caller's last error message as it was, also when it ran other
 * requests (each clears the thread's error first). 30 rounds of two requests, the second
 * waited for with a known error set; the waiting thread must have run some of them. */
static int keeps_last_error(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    const struct braid_comm *c = (const struct braid_comm *)comm;
    uint64_t helped0 = c->q_helped;
    for (int round = 0; round < 30; round++) {
        float a[16], b[16];
        for (int i = 0; i < 16; i++)
            a[i] = b[i] = (float)(rank + i);
        braid_request_t qa, qb;
        MP_OK(rank, braid_iallreduce(a, a, 16, BRAID_FLOAT32, BRAID_SUM, comm, &qa));
        MP_OK(rank, braid_iallreduce(b, b, 16, BRAID_FLOAT32, BRAID_SUM, comm, &qb));
        MP_CHECK(rank, braid_wait(NULL) == BRAID_ERR_INVALID_ARG, "wait(NULL)");
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", braid_last_error());
        MP_CHECK(rank, strstr(msg, "req"), "wait(NULL) said '%s'", msg);
        MP_OK(rank, braid_wait(qb));
        MP_CHECK(rank, !strcmp(braid_last_error(), msg), "round %d: the wait changed '%s' to '%s'",
                 round, msg, braid_last_error());
        MP_OK(rank, braid_wait(qa));
        float want = (float)(n * (n - 1) / 2);
        MP_CHECK(rank, a[0] == want && b[15] == want + (float)(15 * n), "round %d: %g %g", round,
                 a[0], b[15]);
    }
    MP_CHECK(rank, c->q_helped > helped0, "no request was run by a waiting thread");
    return 0;
}

Test(iform_wait, a_wait_keeps_the_last_error, .timeout = 60)
{
    cr_expect_eq(mp_run(2, keeps_last_error, NULL, 40), 0, "see stderr");
    cr_expect_eq(mp_run(3, keeps_last_error, NULL, 40), 0, "see stderr");
}
