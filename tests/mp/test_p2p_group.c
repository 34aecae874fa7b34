/* Groups beyond sends and receives, and point-to-point errors, as real processes: collectives
 * inside a group with i-form requests completed at group end, a group over two communicators
 * (each runs on its worker, at the same time), errors inside a group reported at group end
 * naming the call, argument errors naming the argument, a count mismatch naming both calls, a
 * send posted against a collective on the peer, a killed peer during a receive (shm and tcp);
 * a wait on a request of the open group refused, an error while waiting naming its group call,
 * out of memory at group end completing every request. */
#include "data.h"
#include "mp.h"
#include "proc.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int coll_in_group(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    size_t count = 10007;
    float *a = malloc(count * 4), *b = malloc(count * 4), *s = malloc(count * 4),
          *r = malloc(count * 4);
    data_fill(a, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 3);
    data_fill(s, BRAID_FLOAT32, BRAID_SUM, rank, 0, count, 4);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    braid_request_t q[3];
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_irecv(r, count, BRAID_FLOAT32, prev, comm, &q[0]));
    MP_OK(rank, braid_iallreduce(a, b, count, BRAID_FLOAT32, BRAID_SUM, comm, &q[1]));
    MP_OK(rank, braid_isend(s, count, BRAID_FLOAT32, next, comm, &q[2]));
    MP_OK(rank, braid_broadcast(a, a, count, BRAID_FLOAT32, n - 1, comm)); /* after allreduce */
    MP_OK(rank, braid_group_end());
    for (int i = 0; i < 3; i++) {
        int done = 0;
        MP_OK(rank, braid_test(q[i], &done));
        MP_CHECK(rank, done, "request %d not complete at group end", i);
    }
    MP_CHECK(rank, !data_check_reduced(b, BRAID_FLOAT32, BRAID_SUM, n, 0, count, 3, "allreduce"),
             "allreduce in group");
    MP_CHECK(rank, !data_check_rank(a, BRAID_FLOAT32, BRAID_SUM, n - 1, 0, count, 3, "bcast"),
             "broadcast in group");
    MP_CHECK(rank, !data_check_rank(r, BRAID_FLOAT32, BRAID_SUM, prev, 0, count, 4, "recv"),
             "recv in group");
    free(a);
    free(b);
    free(s);
    free(r);
    return 0;
}

Test(p2p_group, collectives_and_requests_in_a_group, .timeout = 120)
{
    int ns[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        cr_assert_eq(mp_run(ns[i], coll_in_group, NULL, 60), 0, "n=%d", ns[i]);
}

/* Sends on one communicator and receives on another, in one group: deadlocks unless the
 * communicators progress at the same time. */
/* A request of a call in this thread's open group completes at its group end: braid_wait on
 * it there is refused (it would never return), braid_test never reports it done; both work
 * once the group ended. Nested groups: still open until the outermost end. */
static int wait_in_open_group(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float s[8], r[8] = {0}, a[8], b[8];
    for (int i = 0; i < 8; i++)
        s[i] = a[i] = (float)(rank * 10 + i);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    braid_request_t q[3];
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_irecv(r, 8, BRAID_FLOAT32, prev, comm, &q[0]));
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_isend(s, 8, BRAID_FLOAT32, next, comm, &q[1]));
    MP_OK(rank, braid_iallreduce(a, b, 8, BRAID_FLOAT32, BRAID_SUM, comm, &q[2]));
    MP_OK(rank, braid_group_end()); /* inner: the group is still open */
    for (int i = 0; i < 3; i++) {
        braid_result_t res = braid_wait(q[i]);
        MP_CHECK(rank,
                 res == BRAID_ERR_INVALID_USAGE && strstr(braid_last_error(), "still open") &&
                     strstr(braid_last_error(), "braid_wait"),
                 "wait %d in the open group: %s: %s", i, braid_strerror(res), braid_last_error());
        int done = 1;
        res = braid_test(q[i], &done);
        MP_CHECK(rank, res == BRAID_ERR_INVALID_USAGE && !done, "test %d in the open group: %s %d",
                 i, braid_strerror(res), done);
    }
    MP_OK(rank, braid_group_end());
    for (int i = 0; i < 3; i++)
        MP_OK(rank, braid_wait(q[i]));
    for (int i = 0; i < 8; i++) {
        MP_CHECK(rank, r[i] == (float)(prev * 10 + i), "r[%d]=%g", i, r[i]);
        MP_CHECK(rank, b[i] == (float)(5 * n * (n - 1) + n * i), "b[%d]=%g", i, b[i]);
    }
    return 0;
}

Test(p2p_group, wait_on_a_request_of_the_open_group_is_refused, .timeout = 60)
{
    cr_assert_eq(mp_run(1, wait_in_open_group, NULL, 20), 0, "n=1");
    cr_assert_eq(mp_run(2, wait_in_open_group, NULL, 20), 0, "n=2");
}

static int two_comms(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c2;
    MP_OK(rank, braid_comm_split(comm, 0, n - rank, &c2)); /* reversed numbering */
    int r2;
    MP_OK(rank, braid_comm_rank(c2, &r2));
    size_t count = 250007;
    int32_t *s1 = malloc(count * 4), *s2 = malloc(count * 4), *o1 = malloc(count * 4),
            *o2 = malloc(count * 4);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    /* in c2, rank r2 = n-1-rank: its next in comm numbering is rank next = n-1-next in c2 */
    data_fill(s1, BRAID_INT32, BRAID_SUM, rank, 0, count, 11);
    data_fill(s2, BRAID_INT32, BRAID_SUM, rank, 0, count, 12);
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_send(s2, count, BRAID_INT32, n - 1 - next, c2));
    MP_OK(rank, braid_recv(o1, count, BRAID_INT32, prev, comm));
    MP_OK(rank, braid_send(s1, count, BRAID_INT32, next, comm));
    MP_OK(rank, braid_recv(o2, count, BRAID_INT32, n - 1 - prev, c2));
    MP_OK(rank, braid_group_end());
    MP_CHECK(rank, !data_check_rank(o1, BRAID_INT32, BRAID_SUM, prev, 0, count, 11, "c1"), "c1");
    MP_CHECK(rank, !data_check_rank(o2, BRAID_INT32, BRAID_SUM, prev, 0, count, 12, "c2"), "c2");
    MP_OK(rank, braid_comm_destroy(c2));
    free(s1);
    free(s2);
    free(o1);
    free(o2);
    return 0;
}

Test(p2p_group, one_group_over_two_communicators, .timeout = 120)
{
    cr_assert_eq(mp_run(2, two_comms, NULL, 60), 0);
    cr_assert_eq(mp_run(4, two_comms, NULL, 60), 0);
}

static int errors(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    float x[4] = {1, 2, 3, 4};
    braid_request_t req;
    braid_result_t r = braid_send(x, 4, BRAID_FLOAT32, n, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "peer=") != NULL,
             "bad peer: %s", braid_last_error());
    r = braid_recv(x, 4, BRAID_FLOAT32, -1, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "peer=-1"), "%s",
             braid_last_error());
    r = braid_send(NULL, 4, BRAID_FLOAT32, 0, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "sendbuf"), "%s",
             braid_last_error());
    r = braid_recv(NULL, 4, BRAID_FLOAT32, 0, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "recvbuf"), "%s",
             braid_last_error());
    r = braid_send(x, 4, (braid_datatype_t)99, 0, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "dtype"), "%s",
             braid_last_error());
    r = braid_isend(x, 4, BRAID_FLOAT32, 0, comm, NULL);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "req_p"), "%s",
             braid_last_error());
    r = braid_send(x, 4, BRAID_FLOAT32, 0, NULL);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "comm"), "%s",
             braid_last_error());
    r = braid_group_end();
    MP_CHECK(rank, r == BRAID_ERR_INVALID_USAGE, "group_end without start: %s", braid_strerror(r));
    /* An error inside a group: the call returns it, group end names the call, nothing runs. */
    float y[4];
    MP_OK(rank, braid_group_start());
    MP_OK(rank, braid_irecv(y, 4, BRAID_FLOAT32, (rank + n - 1) % n, comm, &req));
    r = braid_send(x, 4, BRAID_FLOAT32, n + 5, comm);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "bad peer in a group: %s", braid_strerror(r));
    r = braid_group_end();
    MP_CHECK(rank,
             r == BRAID_ERR_INVALID_ARG && strstr(braid_last_error(), "group call 2") &&
                 strstr(braid_last_error(), "peer="),
             "group end: %s: %s", braid_strerror(r), braid_last_error());
    r = braid_wait(req);
    MP_CHECK(rank, r == BRAID_ERR_INVALID_ARG, "request of a failed group: %s", braid_strerror(r));
    /* The communicator still works (nothing ran). */
    float s = (float)rank, t = 0;
    MP_OK(rank, braid_allreduce(&s, &t, 1, BRAID_FLOAT32, BRAID_SUM, comm));
    MP_CHECK(rank, t == (float)(n * (n - 1) / 2), "allreduce after a failed group");
    if (n < 2) return 0;
    /* A count mismatch: both calls named. Last: it fails the communicator. */
    if (rank == 0) r = braid_send(x, 3, BRAID_FLOAT32, 1, comm);
    if (rank == 1) {
        r = braid_recv(y, 4, BRAID_FLOAT32, 0, comm);
        MP_CHECK(rank,
                 r == BRAID_ERR_MISMATCH && strstr(braid_last_error(), "send #1 to rank 1") &&
                     strstr(braid_last_error(), "recv #1 from rank 0") &&
                     strstr(braid_last_error(), "count 3") && strstr(braid_last_error(), "count 4"),
                 "mismatch: %s: %s", braid_strerror(r), braid_last_error());
    }
    return 0;
}

Test(p2p_group, argument_errors_and_mismatches_are_named, .timeout = 60)
{
    cr_assert_eq(mp_run(1, errors, NULL, 30), 0);
    cr_assert_eq(mp_run(2, errors, NULL, 30), 0);
    cr_assert_eq(mp_run(3, errors, NULL, 30), 0);
}

/* A large send against a collective on the peer: an error on both sides, in bounded time. */
static int send_vs_coll(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    size_t count = 1 << 20;
    float *buf = calloc(count, 4);
    double t0 = proc_now_s();
    braid_result_t r = rank == 0 ? braid_send(buf, count, BRAID_FLOAT32, 1, comm)
                                 : braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
    double t = proc_now_s() - t0;
    free(buf);
    fprintf(stderr, "rank %d: %s: %s after %.2f s\n", rank, braid_strerror(r), braid_last_error(),
            t);
    MP_CHECK(rank, r == BRAID_ERR_TIMEOUT || r == BRAID_ERR_REMOTE || r == BRAID_ERR_MISMATCH,
             "got %s", braid_strerror(r));
    MP_CHECK(rank, t < 10, "took %.2f s", t);
    return 0;
}

Test(p2p_group, send_against_a_collective_is_an_error, .timeout = 60)
{
    setenv("BRAID_TIMEOUT", "2", 1);
    cr_assert_eq(mp_run(2, send_vs_coll, NULL, 30), 0);
}

/* A peer killed while this rank waits in a receive from it. */
static int recv_from_victim(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    if (rank == 1) {
        atomic_store((atomic_int *)arg, 1); /* its communicator is up */
        pause();                            /* killed by the test */
        return 1;
    }
    float buf[16];
    double t0 = proc_now_s();
    braid_result_t r = braid_recv(buf, 16, BRAID_FLOAT32, 1, comm);
    double t = proc_now_s() - t0;
    fprintf(stderr, "rank %d: %s: %s after %.2f s\n", rank, braid_strerror(r), braid_last_error(),
            t);
    MP_CHECK(rank, r == BRAID_ERR_REMOTE || (rank != 0 && r == BRAID_ERR_TIMEOUT), "got %s",
             braid_strerror(r));
    if (rank == 0) MP_CHECK(rank, strstr(braid_last_error(), "rank 1"), "does not name rank 1");
    MP_CHECK(rank, t < 20, "took %.2f s", t);
    return 0;
}

/* An error found while rank 0 waits in a group {send 8 MiB to rank 1 (call 1), recv from rank
 * 2 (call 2)}, both blocked: rank 1 sleeps, rank 2 calls an all-reduce (mismatch, found by
 * the receive's check) or sleeps too (timeout after BRAID_TIMEOUT=2, naming the operation its
 * wait was on). The message names the group call that found it, no other. */
static int names_the_call(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    int timeout = arg != NULL;
    size_t count = ((size_t)8 << 20) / sizeof(float);
    float *buf = calloc(count + 4, sizeof(float));
    MP_CHECK(rank, buf, "out of memory");
    if (rank == 0) {
        MP_OK(rank, braid_group_start());
        MP_OK(rank, braid_send(buf, count, BRAID_FLOAT32, 1, comm));
        MP_OK(rank, braid_recv(buf + count, 4, BRAID_FLOAT32, 2, comm));
        braid_result_t r = braid_group_end();
        const char *m = braid_last_error();
        fprintf(stderr, "rank 0: %s: %s\n", braid_strerror(r), m);
        int on_recv = strstr(m, "receive from rank 2") != NULL; /* the timeout's wait */
        if (!timeout)
            MP_CHECK(rank,
                     r == BRAID_ERR_MISMATCH && strstr(m, "group call 2: recv #1 from rank 2") &&
                         !strstr(m, "group call 1"),
                     "mismatch: %s: %s", braid_strerror(r), m);
        else
            MP_CHECK(rank,
                     r == BRAID_ERR_TIMEOUT &&
                         strstr(m, on_recv ? "group call 2: recv #1 from rank 2"
                                           : "group call 1: send #1 to rank 1") &&
                         !strstr(m, on_recv ? "group call 1" : "group call 2"),
                     "timeout: %s: %s", braid_strerror(r), m);
    } else if (rank == 2 && !timeout) {
        float x = 1, y;
        braid_allreduce(&x, &y, 1, BRAID_FLOAT32, BRAID_SUM, comm); /* fails: rank 0 tells */
    } else {
        sleep(timeout ? 4 : 2); /* past rank 0's error */
    }
    free(buf);
    return 0;
}

Test(p2p_group, an_error_while_waiting_names_its_group_call, .timeout = 120)
{
    setenv("BRAID_TIMEOUT", "2", 1);
    cr_expect_eq(mp_run(3, names_the_call, NULL, 30), 0, "mismatch");
    for (int k = 0; k < 3; k++)
        cr_expect_eq(mp_run(3, names_the_call, (void *)1, 30), 0, "timeout, run %d", k);
    unsetenv("BRAID_TIMEOUT");
}

/* Group end runs out of memory while it gathers the group's sends and receives into one batch
 * (the address space limited to just above what the process uses once the calls are made):
 * it returns BRAID_ERR_NOMEM, and every request of the group completes with it, those already
 * moved into the batch too (braid_wait on them returned never before). */
static int batch_out_of_memory(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    enum { N = 60000 };
    static float x[N];
    braid_request_t *q = calloc(N, sizeof(*q));
    MP_CHECK(rank, q, "out of memory");
    MP_OK(rank, braid_group_start());
    for (int i = 0; i < N; i++)
        MP_OK(rank, braid_isend(&x[i], 1, BRAID_FLOAT32, rank, comm, &q[i]));
    long pages = 0, page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    MP_CHECK(rank, f && fscanf(f, "%ld", &pages) == 1, "statm");
    fclose(f);
    struct rlimit was, lim;
    MP_CHECK(rank, getrlimit(RLIMIT_AS, &was) == 0, "getrlimit");
    lim = was;
    lim.rlim_cur = (rlim_t)(pages * page) + ((rlim_t)2 << 20); /* the batch needs ~8 MiB */
    MP_CHECK(rank, setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit");
    braid_result_t r = braid_group_end();
    setrlimit(RLIMIT_AS, &was);
    /* Where the allocator still had free memory enough for the batch (another libc, another
     * heap), group end runs the sends: nothing tested, but no failure either. */
    braid_result_t want = r == BRAID_SUCCESS ? BRAID_SUCCESS : BRAID_ERR_NOMEM;
    if (r == BRAID_SUCCESS) fprintf(stderr, "batch_out_of_memory: the batch fit, inconclusive\n");
    MP_CHECK(rank,
             r == BRAID_SUCCESS ||
                 (r == BRAID_ERR_NOMEM && strstr(braid_last_error(), "operations")),
             "group end: %s: %s", braid_strerror(r), braid_last_error());
    for (int i = 0; i < N; i++) {
        r = braid_wait(q[i]);
        MP_CHECK(rank, r == want, "request %d: %s: %s", i, braid_strerror(r), braid_last_error());
    }
    free(q);
    return 0;
}

/* The sanitizers' allocators abort where the address space runs out. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

Test(p2p_group, out_of_memory_for_the_batch_completes_every_request, .timeout = 60)
{
#ifdef UNDER_SANITIZER
    cr_skip_test("the address space limit aborts the sanitizers' allocators");
#endif
    cr_assert_eq(mp_run(1, batch_out_of_memory, NULL, 30), 0);
}

static void killed_peer(int n)
{
    /* Killed once its communicator is up, never during init (a loaded machine may take seconds
     * to get there), and with rank 0 most likely in its receive by then. */
    atomic_int *up =
        mmap(NULL, sizeof(*up), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(up != MAP_FAILED);
    atomic_init(up, 0);
    mp_job_t job;
    mp_start(&job, n, recv_from_victim, up);
    double t0 = proc_now_s();
    while (!atomic_load(up) && proc_now_s() - t0 < 25)
        usleep(10 * 1000);
    usleep(300 * 1000);
    kill(job.pids[1], SIGKILL);
    munmap(up, sizeof(*up));
    mp_wait(&job, 40);
    for (int r = 0; r < n; r++) {
        if (r == 1) continue;
        cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
                  "n=%d: rank %d did not report the dead peer (see stderr)", n, r);
    }
    cr_assert_eq(mp_shm_leftovers(&job), 0, "shm segments left");
}

Test(p2p_group, killed_peer_during_recv_shm, .timeout = 60)
{
    setenv("BRAID_TIMEOUT", "15", 1);
    killed_peer(2);
    killed_peer(3);
}

Test(p2p_group, killed_peer_during_recv_tcp, .timeout = 60)
{
    setenv("BRAID_TIMEOUT", "15", 1);
    setenv("BRAID_TRANSPORT", "tcp", 1);
    killed_peer(2);
}
