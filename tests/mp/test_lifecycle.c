/* Communicator and request lifetimes against hostile use: braid_comm_destroy from another
 * thread while a collective is blocked on the communicator, requests used after their
 * communicator was destroyed, a request waited on twice, stale communicator handles, and two
 * threads calling one communicator at once. Each case runs on shm and on tcp. The harness
 * destroys each rank's communicator after the test function; a test that destroyed it
 * already makes that second destroy a refused no-op (BRAID_ERR_INVALID_USAGE). */
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const char *transports[] = {"shm", "tcp"};

typedef struct {
    braid_comm_t comm;
    int delay_ms;
    braid_result_t res;
    double at;
} later_t;

static void *destroy_later(void *arg)
{
    later_t *l = arg;
    usleep((useconds_t)l->delay_ms * 1000);
    l->at = now_s();
    l->res = braid_comm_destroy(l->comm);
    return NULL;
}

#define COUNT (1 << 20) /* more than the FIFOs hold, so the call blocks on its peer */

/* Rank 0 blocks in an all-reduce (rank 1 comes 1.5 s late) and another thread destroys the
 * communicator under it: the call returns BRAID_ERR_ABORTED saying it was destroyed, destroy
 * returns once the call left, and the late peer gets an error naming rank 0, not a timeout. */
static int destroy_during_call(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float *buf = calloc(COUNT, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)(rank + (int)(i % 7));
    if (rank == 0) {
        later_t l = {.comm = comm, .delay_ms = 300};
        pthread_t t;
        pthread_create(&t, NULL, destroy_later, &l);
        double t0 = now_s();
        braid_result_t r = braid_allreduce(buf, buf, COUNT, BRAID_FLOAT32, BRAID_SUM, comm);
        double left = now_s();
        pthread_join(t, NULL);
        double done = now_s();
        free(buf);
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "got %s: %s", braid_strerror(r), braid_last_error());
        MP_CHECK(rank, strstr(braid_last_error(), "destroyed"), "message: %s", braid_last_error());
        MP_CHECK(rank, l.res == BRAID_SUCCESS, "destroy returned %s", braid_strerror(l.res));
        MP_CHECK(rank, left - t0 < 2.0, "the call took %.2f s to leave", left - t0);
        MP_CHECK(rank, done - l.at < 2.0, "destroy took %.2f s", done - l.at);
        /* The handle is dead now. */
        float x = 1;
        r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "not a live"),
                 "call on the destroyed comm: %s: %s", braid_strerror(r), braid_last_error());
        return 0;
    }
    usleep(1500 * 1000);
    double t0 = now_s();
    braid_result_t r = braid_allreduce(buf, buf, COUNT, BRAID_FLOAT32, BRAID_SUM, comm);
    double el = now_s() - t0;
    free(buf);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED, "peer got %s: %s",
             braid_strerror(r), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "rank 0"), "message: %s", braid_last_error());
    MP_CHECK(rank, el < 3.0, "the peer's call took %.2f s", el);
    return 0;
}

TestSuite(lifecycle, .timeout = 120);

Test(lifecycle, destroy_from_another_thread_aborts_the_blocked_call)
{
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_TIMEOUT", "30", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        cr_assert_eq(mp_run(2, destroy_during_call, NULL, 60), 0, "transport %s", transports[t]);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_TIMEOUT");
}

/* Requests outlive their communicator: one in flight and one queued when rank 0 destroys the
 * communicator complete with an error that says it was destroyed; waiting is safe after the
 * destroy (ASan: no read of freed memory), and a second wait on a request is refused. */
static int requests_after_destroy(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float *a = calloc(COUNT, sizeof(float)), *b = calloc(COUNT, sizeof(float));
    MP_CHECK(rank, a && b, "out of memory");
    if (rank == 0) {
        braid_request_t r1, r2;
        MP_OK(rank, braid_iallreduce(a, a, COUNT, BRAID_FLOAT32, BRAID_SUM, comm, &r1));
        MP_OK(rank, braid_iallreduce(b, b, COUNT, BRAID_FLOAT32, BRAID_SUM, comm, &r2));
        usleep(200 * 1000); /* r1 is blocked on rank 1, r2 queued behind it */
        MP_OK(rank, braid_comm_destroy(comm));
        int done = 0;
        braid_result_t r = braid_test(r2, &done);
        MP_CHECK(rank, done == 1 && r == BRAID_ERR_ABORTED, "test after destroy: done %d, %s: %s",
                 done, braid_strerror(r), braid_last_error());
        MP_CHECK(rank, strstr(braid_last_error(), "destroyed"), "message: %s", braid_last_error());
        r = braid_wait(r1);
        MP_CHECK(rank, r == BRAID_ERR_ABORTED && strstr(braid_last_error(), "destroyed"),
                 "wait after destroy: %s: %s", braid_strerror(r), braid_last_error());
        r = braid_wait(r1);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "already"),
                 "second wait: %s: %s", braid_strerror(r), braid_last_error());
        r = braid_test(r2, &done);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "already"),
                 "second test: %s: %s", braid_strerror(r), braid_last_error());
    } else {
        usleep(1000 * 1000);
        braid_result_t r = braid_allreduce(a, a, COUNT, BRAID_FLOAT32, BRAID_SUM, comm);
        MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED, "peer got %s: %s",
                 braid_strerror(r), braid_last_error());
    }
    free(a);
    free(b);
    return 0;
}

Test(lifecycle, requests_stay_valid_after_destroy_and_a_second_wait_is_refused)
{
    setenv("BRAID_ALGO", "ring", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        cr_assert_eq(mp_run(2, requests_after_destroy, NULL, 60), 0, "transport %s", transports[t]);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_ALGO");
}

/* A completed request waited on twice, on a live communicator. */
static int wait_twice(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    int x[3] = {rank, rank + 1, rank * 2};
    braid_request_t req;
    MP_OK(rank, braid_iallreduce(x, x, 3, BRAID_INT32, BRAID_SUM, comm, &req));
    MP_OK(rank, braid_wait(req));
    int s = n * (n - 1) / 2;
    MP_CHECK(rank, x[0] == s && x[1] == s + n && x[2] == 2 * s, "wrong sums %d %d %d", x[0], x[1],
             x[2]);
    braid_result_t r = braid_wait(req);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "second wait: %s", braid_strerror(r));
    int done = 7;
    r = braid_test(req, &done);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "test after wait: %s", braid_strerror(r));
    /* The communicator is unharmed. */
    MP_OK(rank, braid_barrier(comm));
    return 0;
}

Test(lifecycle, waiting_twice_on_a_request_is_refused)
{
    cr_assert_eq(mp_run(2, wait_twice, NULL, 30), 0);
    cr_assert_eq(mp_run(1, wait_twice, NULL, 30), 0);
}

/* Stale handles stay detected when new communicators are created after the destroy (malloc
 * would otherwise hand the freed address to the next communicator). */
static int stale_handles(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)comm;
    (void)n;
    (void)arg;
    enum { K = 12 };
    braid_comm_t dead[K];
    for (int k = 0; k < K; k++) {
        braid_unique_id_t id;
        MP_OK(rank, braid_get_unique_id(&id));
        MP_OK(rank, braid_comm_init_rank(&dead[k], 1, id, 0));
        MP_OK(rank, braid_comm_destroy(dead[k]));
    }
    braid_unique_id_t id;
    MP_OK(rank, braid_get_unique_id(&id));
    braid_comm_t live;
    MP_OK(rank, braid_comm_init_rank(&live, 1, id, 0));
    for (int k = 0; k < K; k++) {
        MP_CHECK(rank, dead[k] != live, "a new communicator reuses destroyed handle %d", k);
        int size;
        braid_result_t r = braid_comm_size(dead[k], &size);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "stale handle %d: %s", k, braid_strerror(r));
        r = braid_barrier(dead[k]);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "stale handle %d: %s", k, braid_strerror(r));
        /* Every kind of entry: point-to-point, p2p collectives, groups. */
        float f[4] = {1, 2, 3, 4}, g[4];
        size_t cnt[1] = {1}, dsp[1] = {0};
        braid_request_t req = NULL;
        braid_result_t rs[] = {braid_send(f, 1, BRAID_FLOAT32, 0, dead[k]),
                               braid_recv(g, 1, BRAID_FLOAT32, 0, dead[k]),
                               braid_isend(f, 1, BRAID_FLOAT32, 0, dead[k], &req),
                               braid_irecv(g, 1, BRAID_FLOAT32, 0, dead[k], &req),
                               braid_alltoall(f, g, 1, BRAID_FLOAT32, dead[k]),
                               braid_alltoallv(f, cnt, dsp, g, cnt, dsp, BRAID_FLOAT32, dead[k]),
                               braid_gather(f, g, 1, BRAID_FLOAT32, 0, dead[k]),
                               braid_scatter(f, g, 1, BRAID_FLOAT32, 0, dead[k]),
                               braid_allgatherv(f, 1, g, cnt, dsp, BRAID_FLOAT32, dead[k]),
                               braid_reduce_scatterv(f, g, cnt, BRAID_FLOAT32, BRAID_SUM, dead[k]),
                               braid_ialltoall(f, g, 1, BRAID_FLOAT32, dead[k], &req)};
        for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
            MP_CHECK(rank, rs[i] == BRAID_ERR_INVALID_USAGE, "stale handle %d, call %zu: %s", k, i,
                     braid_strerror(rs[i]));
        MP_CHECK(rank, req == NULL, "a request was returned for a stale handle");
        MP_OK(rank, braid_group_start());
        braid_send(f, 1, BRAID_FLOAT32, 0, dead[k]);
        r = braid_group_end();
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "not a live"),
                 "group on a stale handle: %s: %s", braid_strerror(r), braid_last_error());
        MP_CHECK(rank, braid_comm_destroy(dead[k]) == BRAID_ERR_INVALID_USAGE, "destroyed twice");
    }
    float v = 2.5f;
    MP_OK(rank, braid_allreduce(&v, &v, 1, BRAID_FLOAT32, BRAID_SUM, live));
    MP_CHECK(rank, v == 2.5f, "v = %g", v);
    MP_OK(rank, braid_comm_destroy(live));
    return 0;
}

Test(lifecycle, stale_communicator_handles_are_refused)
{
    cr_assert_eq(mp_run(1, stale_handles, NULL, 30), 0);
}

typedef struct {
    braid_comm_t comm;
    float *buf;
    braid_result_t res;
} call_t;

static void *allreduce_thread(void *arg)
{
    call_t *c = arg;
    c->res = braid_allreduce(c->buf, c->buf, COUNT, BRAID_FLOAT32, BRAID_SUM, c->comm);
    return NULL;
}

/* Two threads of rank 0 call the communicator at once: the second call is refused at once with
 * BRAID_ERR_INVALID_USAGE naming both calls and the rule; the communicator is failed on every
 * rank afterwards (an error, never a hang or a silent pairing). */
static int two_threads(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float *buf = calloc(COUNT, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    if (rank == 0) {
        call_t c = {.comm = comm, .buf = buf};
        pthread_t t;
        pthread_create(&t, NULL, allreduce_thread, &c);
        usleep(300 * 1000); /* the thread is blocked in its all-reduce (rank 1 is late) */
        float x[2] = {1, 2};
        double t0 = now_s();
        braid_result_t r = braid_broadcast(x, x, 2, BRAID_FLOAT32, 0, comm);
        double el = now_s() - t0;
        const char *m = braid_last_error();
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "second thread got %s: %s", braid_strerror(r),
                 m);
        MP_CHECK(rank, strstr(m, "broadcast") && strstr(m, "allreduce") && strstr(m, "one thread"),
                 "message: %s", m);
        MP_CHECK(rank, el < 0.5, "the refusal took %.2f s", el);
        pthread_join(t, NULL);
        /* The thread's own call may finish (its data was all there) or fail; afterwards the
         * communicator is failed. */
        r = braid_barrier(comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "one thread"),
                 "barrier after the violation: %s: %s", braid_strerror(r), braid_last_error());
    } else {
        usleep(1000 * 1000);
        double t0 = now_s();
        braid_result_t r = braid_allreduce(buf, buf, COUNT, BRAID_FLOAT32, BRAID_SUM, comm);
        if (r == BRAID_SUCCESS) r = braid_barrier(comm);
        double el = now_s() - t0;
        MP_CHECK(rank, r == BRAID_ERR_REMOTE && strstr(braid_last_error(), "one thread"),
                 "peer got %s: %s", braid_strerror(r), braid_last_error());
        MP_CHECK(rank, el < 3.0, "the peer's calls took %.2f s", el);
    }
    free(buf);
    return 0;
}

Test(lifecycle, two_threads_in_one_communicator_are_refused)
{
    setenv("BRAID_ALGO", "ring", 1);
    setenv("BRAID_TIMEOUT", "30", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        cr_assert_eq(mp_run(2, two_threads, NULL, 60), 0, "transport %s", transports[t]);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_TIMEOUT");
}

static void *abort_later(void *arg)
{
    later_t *l = arg;
    usleep((useconds_t)l->delay_ms * 1000);
    l->at = now_s();
    l->res = braid_comm_abort(l->comm);
    return NULL;
}

/* An abort while a 1-element all-reduce waits: rank 0 sent its element before it aborted, so
 * rank 1, which comes late, may complete its call with the right sum (braid.h documents it);
 * its next call must then fail naming rank 0, within a second. */
static int abort_small_allreduce(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float x = rank == 0 ? 3.0f : 5.0f;
    if (rank == 0) {
        later_t l = {.comm = comm, .delay_ms = 300};
        pthread_t t;
        pthread_create(&t, NULL, abort_later, &l);
        braid_result_t r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
        pthread_join(t, NULL);
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "the aborted call returned %s", braid_strerror(r));
        return 0;
    }
    usleep(800 * 1000);
    double t0 = now_s();
    braid_result_t r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
    if (r == BRAID_SUCCESS) {
        MP_CHECK(rank, x == 8.0f, "completed with %g, expected 8", x);
        fprintf(stderr, "rank 1: the call in flight completed (its data was there)\n");
        r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
    }
    double el = now_s() - t0;
    MP_CHECK(rank,
             r == BRAID_ERR_REMOTE && strstr(braid_last_error(), "rank 0") &&
                 strstr(braid_last_error(), "abort"),
             "peer got %s: %s", braid_strerror(r), braid_last_error());
    MP_CHECK(rank, el < 1.0, "the peer's calls took %.2f s", el);
    return 0;
}

Test(lifecycle, abort_in_a_one_element_allreduce_reaches_the_peer)
{
    setenv("BRAID_TIMEOUT", "30", 1);
    const char *algos[] = {"ring", "recdbl", ""};
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        for (int a = 0; a < 3; a++) {
            setenv("BRAID_ALGO", algos[a], 1);
            cr_assert_eq(mp_run(2, abort_small_allreduce, NULL, 60), 0, "transport %s, algo %s",
                         transports[t], algos[a]);
        }
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_ALGO");
    unsetenv("BRAID_TIMEOUT");
}

/* ---- point-to-point, p2p collectives and groups behind the same entry guard ------------- */
typedef enum { BLOCK_RECV, BLOCK_ALLTOALL, BLOCK_GROUP_RECV } block_kind_t;
static const char *block_names[] = {"recv", "alltoall", "group recv"};

/* Rank 0's call that blocks on rank 1 (which is late): a receive, an all-to-all of more than
 * the FIFOs hold, or a receive inside a group (blocked in braid_group_end). msg gets the
 * call's message. */
static braid_result_t blocking_call(block_kind_t k, float *buf, braid_comm_t comm, char *msg,
                                    size_t len)
{
    braid_result_t r = BRAID_ERR_INTERNAL;
    braid_request_t req = NULL;
    switch (k) {
    case BLOCK_RECV:
        r = braid_recv(buf, COUNT, BRAID_FLOAT32, 1, comm);
        break;
    case BLOCK_ALLTOALL:
        r = braid_alltoall(buf, buf + 2 * COUNT, COUNT, BRAID_FLOAT32, comm);
        break;
    case BLOCK_GROUP_RECV:
        braid_group_start();
        r = braid_irecv(buf, COUNT, BRAID_FLOAT32, 1, comm, &req);
        if (r == BRAID_SUCCESS) r = braid_group_end();
        break;
    }
    snprintf(msg, len, "%s", braid_last_error());
    if (req) braid_wait(req);
    return r;
}

/* Rank 0 blocks in a point-to-point call or p2p collective and another thread destroys the
 * communicator: the call returns BRAID_ERR_ABORTED saying it was destroyed, destroy returns
 * once it left, the handle is dead for every entry, and the late peer gets an error naming
 * rank 0 instead of a timeout. */
static int destroy_during_p2p(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    block_kind_t k = *(const block_kind_t *)arg;
    /* alltoall: blocks of COUNT (a block must not fit in the send/recv FIFO either) */
    float *buf = calloc(4 * COUNT, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t i = 0; i < 4 * COUNT; i++)
        buf[i] = (float)(rank * 5 + (int)(i % 13));
    if (rank == 0) {
        later_t l = {.comm = comm, .delay_ms = 300};
        pthread_t t;
        pthread_create(&t, NULL, destroy_later, &l);
        double t0 = now_s();
        char msg[600];
        braid_result_t r = blocking_call(k, buf, comm, msg, sizeof(msg));
        double left = now_s();
        pthread_join(t, NULL);
        double done = now_s();
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "%s got %s: %s", block_names[k], braid_strerror(r),
                 msg);
        MP_CHECK(rank, strstr(msg, "destroyed"), "%s: message: %s", block_names[k], msg);
        MP_CHECK(rank, l.res == BRAID_SUCCESS, "destroy returned %s", braid_strerror(l.res));
        MP_CHECK(rank, left - t0 < 2.0, "the call took %.2f s to leave", left - t0);
        MP_CHECK(rank, done - l.at < 2.0, "destroy took %.2f s", done - l.at);
        braid_request_t req;
        braid_result_t rs[4] = {braid_send(buf, 4, BRAID_FLOAT32, 1, comm),
                                braid_irecv(buf, 4, BRAID_FLOAT32, 1, comm, &req),
                                braid_alltoall(buf, buf + 8, 2, BRAID_FLOAT32, comm),
                                braid_gather(buf, buf + 8, 2, BRAID_FLOAT32, 0, comm)};
        for (int i = 0; i < 4; i++)
            MP_CHECK(rank, rs[i] == BRAID_ERR_INVALID_USAGE, "call %d on the destroyed comm: %s", i,
                     braid_strerror(rs[i]));
        free(buf);
        return 0;
    }
    usleep(1500 * 1000);
    double t0 = now_s();
    braid_result_t r = k == BLOCK_ALLTOALL
                           ? braid_alltoall(buf, buf + 2 * COUNT, COUNT, BRAID_FLOAT32, comm)
                           : braid_send(buf, COUNT, BRAID_FLOAT32, 0, comm);
    double el = now_s() - t0;
    free(buf);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED, "peer got %s: %s",
             braid_strerror(r), braid_last_error());
    MP_CHECK(rank, strstr(braid_last_error(), "rank 0"), "message: %s", braid_last_error());
    MP_CHECK(rank, el < 3.0, "the peer's call took %.2f s", el);
    return 0;
}

Test(lifecycle, destroy_from_another_thread_aborts_a_blocked_p2p_call)
{
    setenv("BRAID_TIMEOUT", "30", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        for (block_kind_t k = BLOCK_RECV; k <= BLOCK_GROUP_RECV; k++)
            cr_expect_eq(mp_run(2, destroy_during_p2p, &k, 60), 0, "transport %s, %s",
                         transports[t], block_names[k]);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_TIMEOUT");
}

typedef struct {
    braid_comm_t comm;
    const float *buf;
    braid_result_t res;
} send_t;

/* More than the FIFOs and tcp's socket buffers hold, so the send blocks until rank 1 receives. */
#define BIG (COUNT * 16)

static void *send_thread(void *arg)
{
    send_t *s = arg;
    s->res = braid_send(s->buf, BIG, BRAID_FLOAT32, 1, s->comm);
    return NULL;
}

/* Two threads of rank 0 send on one communicator at once (the first is blocked: rank 1 is
 * late): the second send is refused at once naming the rule, the communicator is failed, and
 * rank 1's receive fails naming it instead of receiving either message. */
static int two_threads_send(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    float *buf = calloc(BIG, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    for (size_t i = 0; i < BIG; i++)
        buf[i] = (float)(rank + (int)(i % 9));
    if (rank == 0) {
        send_t s = {.comm = comm, .buf = buf};
        pthread_t t;
        pthread_create(&t, NULL, send_thread, &s);
        usleep(300 * 1000);
        double t0 = now_s();
        braid_result_t r = braid_send(buf, 3, BRAID_FLOAT32, 1, comm);
        double el = now_s() - t0;
        const char *m = braid_last_error();
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "second thread got %s: %s", braid_strerror(r),
                 m);
        MP_CHECK(rank, strstr(m, "send called") && strstr(m, "in send") && strstr(m, "one thread"),
                 "message: %s", m);
        MP_CHECK(rank, el < 0.5, "the refusal took %.2f s", el);
        pthread_join(t, NULL);
        r = braid_recv(buf, 3, BRAID_FLOAT32, 1, comm);
        MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "one thread"),
                 "recv after the violation: %s: %s", braid_strerror(r), braid_last_error());
    } else {
        usleep(1000 * 1000);
        double t0 = now_s();
        braid_result_t r = braid_recv(buf, BIG, BRAID_FLOAT32, 0, comm);
        if (r == BRAID_SUCCESS) r = braid_recv(buf, 3, BRAID_FLOAT32, 0, comm);
        double el = now_s() - t0;
        MP_CHECK(rank, r == BRAID_ERR_REMOTE && strstr(braid_last_error(), "one thread"),
                 "peer got %s: %s", braid_strerror(r), braid_last_error());
        MP_CHECK(rank, el < 3.0, "the peer's calls took %.2f s", el);
    }
    free(buf);
    return 0;
}

Test(lifecycle, two_threads_sending_on_one_communicator_are_refused)
{
    setenv("BRAID_TIMEOUT", "30", 1);
    for (int t = 0; t < 2; t++) {
        setenv("BRAID_TRANSPORT", transports[t], 1);
        cr_expect_eq(mp_run(2, two_threads_send, NULL, 60), 0, "transport %s", transports[t]);
    }
    unsetenv("BRAID_TRANSPORT");
    unsetenv("BRAID_TIMEOUT");
}
