/* braid_wait runs queued collectives itself (src/core/worker.c: the waiting thread takes the
 * host collectives at the head of the queue while nobody runs one), as real processes: many
 * braid_iallreduce calls of mixed sizes and dtypes waited for in reverse order, from two
 * threads at once, with blocking calls and point-to-point i-forms between them (only the worker
 * runs those), each result checked against the reference (tests/common/data.c); a failure of a
 * collective run for another request leaves a successful wait's error message alone. */
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
} waiter_t;

static void *wait_some(void *arg)
{
    waiter_t *w = arg;
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
        /* a blocking call queues behind them and runs when they did */
        for (int i = 0; i < 5; i++)
            blk[i] = rank + i;
        MP_OK(rank, braid_allreduce(blk, blk, 5, BRAID_INT32, BRAID_MAX, comm));
        for (int i = 0; i < 5; i++)
            MP_CHECK(rank, blk[i] == n - 1 + i, "blocking allreduce: %d", blk[i]);
        if (round == 0) { /* one thread, last request first */
            waiter_t w = {reqs, 0, NREQ, 0};
            wait_some(&w);
            MP_OK(rank, w.res);
        } else { /* two threads at once, each from its last */
            waiter_t a = {reqs, 0, NREQ / 2, 0}, b = {reqs, NREQ / 2, NREQ, 0};
            pthread_t t;
            MP_CHECK(rank, pthread_create(&t, NULL, wait_some, &b) == 0, "pthread_create");
            wait_some(&a);
            pthread_join(t, NULL);
            MP_OK(rank, a.res);
            MP_OK(rank, b.res);
        }
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
    return 0;
}

Test(iform_wait, many_iforms_waited_in_any_order_from_two_threads, .timeout = 180)
{
    for (int n = 1; n <= 4; n++)
        cr_expect_eq(mp_run(n, many_iforms, NULL, 90), 0, "n=%d (see stderr)", n);
    setenv("BRAID_TRANSPORT", "tcp", 1);
    cr_expect_eq(mp_run(3, many_iforms, NULL, 90), 0, "tcp, n=3 (see stderr)");
}

/* Rank 1's second call has another count: the first two requests of rank 0 are fine and
 * waited for last, after the failed one, which the waiting thread may have run. A successful
 * wait leaves the caller's last error message as it was. */
static int failing_middle(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float a[16] = {1}, b[16] = {2}, c[16] = {3};
    braid_request_t q[3];
    MP_OK(rank, braid_iallreduce(a, a, 16, BRAID_FLOAT32, BRAID_SUM, comm, &q[0]));
    MP_OK(rank, braid_iallreduce(b, b, rank == 1 ? 15 : 16, BRAID_FLOAT32, BRAID_SUM, comm, &q[1]));
    MP_OK(rank, braid_iallreduce(c, c, 16, BRAID_FLOAT32, BRAID_SUM, comm, &q[2]));
    braid_result_t r2 = braid_wait(q[2]);
    braid_result_t r1 = braid_wait(q[1]);
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", braid_last_error());
    braid_result_t r0 = braid_wait(q[0]);
    MP_OK(rank, r0);
    MP_CHECK(rank, !strcmp(braid_last_error(), msg),
             "a successful wait changed the message to '%s'", braid_last_error());
    MP_CHECK(rank, a[0] == 2.0f, "the first all-reduce gave %g", a[0]);
    MP_CHECK(rank, r1 == BRAID_ERR_MISMATCH || r1 == BRAID_ERR_REMOTE,
             "the mismatched one: %s (%s)", braid_strerror(r1), msg);
    MP_CHECK(rank, r2 != BRAID_SUCCESS, "the one after it succeeded");
    return 0;
}

Test(iform_wait, a_failure_run_for_another_request, .timeout = 60)
{
    cr_expect_eq(mp_run(2, failing_middle, NULL, 40), 0, "see stderr");
}
