/* Faults with real processes started by hand (no launcher): a SIGKILLed rank, a stopped rank
 * (alive but silent), abort from another thread, mismatched collectives, queued sends to a rank
 * that leaves. Survivors must return the right error, naming the culprit, within a bounded time;
 * no shm segment may be left. */
#include "mp.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    int victim;               /* rank that gets killed / stopped */
    braid_result_t expected;  /* error the survivors must see */
    const char *must_mention; /* substring of the message */
    double max_s;             /* bound on the time from the first failure to the error */
    atomic_int *running;      /* shared: set by the victim once collectives run (or NULL) */
} fault_t;

/* Loops large allreduces until one fails; the victim is killed by the parent (or stops
 * itself) meanwhile. */
static int loop_until_error(braid_comm_t comm, int rank, int n, void *arg)
{
    const fault_t *f = arg;
    (void)n;
    size_t count = 1 << 18;
    float *buf = calloc(count, sizeof(float));
    braid_result_t res = BRAID_SUCCESS;
    double t_fail = 0;
    for (int it = 0; it < 1000000 && res == BRAID_SUCCESS; it++) {
        if (rank == f->victim && it == 20 && f->expected == BRAID_ERR_TIMEOUT) raise(SIGSTOP);
        double t0 = now_s();
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
        t_fail = now_s() - t0;
        if (f->running && rank == f->victim && it == 3) atomic_store(f->running, 1);
    }
    free(buf);
    MP_CHECK(rank, res == f->expected, "got %s (%s), expected %s", braid_strerror(res),
             braid_last_error(), braid_strerror(f->expected));
    MP_CHECK(rank, strstr(braid_last_error(), f->must_mention), "message '%s' does not name '%s'",
             braid_last_error(), f->must_mention);
    MP_CHECK(rank, t_fail < f->max_s, "the failing call took %.2f s", t_fail);
    fprintf(stderr, "rank %d: got '%s' after %.2f s in the failing call\n", rank,
            braid_last_error(), t_fail);
    /* The communicator stays failed (sticky) afterwards. */
    float x = 1;
    MP_CHECK(rank, braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm) != BRAID_SUCCESS,
             "a failed communicator accepted a new collective");
    return 0;
}

TestSuite(fault, .timeout = 120);

Test(fault, killed_rank_gives_remote_error_naming_it_and_leaves_no_shm)
{
    int ns[] = {2, 3, 5};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        int n = ns[i];
        atomic_int *running =
            mmap(NULL, sizeof(*running), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        cr_assert(running != MAP_FAILED);
        atomic_init(running, 0);
        fault_t f = {.victim = 1,
                     .expected = BRAID_ERR_REMOTE,
                     .must_mention = "rank 1",
                     .max_s = 5,
                     .running = running};
        mp_job_t job;
        mp_start(&job, n, loop_until_error, &f);
        /* Kill in the middle of the collectives, never during init (a loaded machine may take
         * seconds to get there): wait until the victim has finished a few all-reduces. */
        double t0 = now_s();
        while (!atomic_load(running) && now_s() - t0 < 60)
            usleep(10 * 1000);
        usleep(200 * 1000);
        kill(job.pids[1], SIGKILL);
        munmap(running, sizeof(*running));
        mp_wait(&job, 60);
        for (int r = 0; r < n; r++) {
            if (r == 1) {
                cr_assert(WIFSIGNALED(job.status[r]) && WTERMSIG(job.status[r]) == SIGKILL);
                continue;
            }
            cr_assert(WIFEXITED(job.status[r]) && WEXITSTATUS(job.status[r]) == 0,
                      "n=%d: survivor rank %d failed (see stderr)", n, r);
        }
        cr_assert_eq(mp_shm_leftovers(&job), 0, "n=%d: shm segments left in /dev/shm", n);
    }
}

/* A rank that is alive but silent: the rank waiting on it directly times out naming it; the
 * others time out naming the rank they wait on, or hear of a peer's failure (REMOTE). */
static int loop_until_timeout(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    size_t count = 1 << 16;
    float *buf = calloc(count, sizeof(float));
    braid_result_t res = BRAID_SUCCESS;
    double t_fail = 0;
    for (int it = 0; it < 1000000 && res == BRAID_SUCCESS; it++) {
        if (rank == 2 && it == 20) raise(SIGSTOP);
        double t0 = now_s();
        res = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, comm);
        t_fail = now_s() - t0;
    }
    free(buf);
    const char *m = braid_last_error();
    fprintf(stderr, "rank %d: got '%s' after %.2f s\n", rank, m, t_fail);
    MP_CHECK(rank, res == BRAID_ERR_TIMEOUT || res == BRAID_ERR_REMOTE, "got %s",
             braid_strerror(res));
    MP_CHECK(rank, t_fail < 5, "the failing call took %.2f s", t_fail);
    if (rank == 0) /* ring 2 -> 0: rank 0 waits on the stopped rank */
        MP_CHECK(rank, res == BRAID_ERR_TIMEOUT && strstr(m, "rank 2"), "message: %s", m);
    return 0;
}

Test(fault, stopped_rank_gives_timeout_naming_it)
{
    setenv("BRAID_TIMEOUT", "1.5", 1);
    mp_job_t job;
    mp_start(&job, 3, loop_until_timeout, NULL);
    int st0, st1;
    waitpid(job.pids[0], &st0, 0);
    waitpid(job.pids[1], &st1, 0);
    kill(job.pids[2], SIGKILL);
    waitpid(job.pids[2], NULL, 0);
    cr_assert(WIFEXITED(st0) && WEXITSTATUS(st0) == 0, "rank 0 did not report the timeout");
    cr_assert(WIFEXITED(st1) && WEXITSTATUS(st1) == 0, "rank 1 did not fail cleanly");
    cr_assert_eq(mp_shm_leftovers(&job), 0);
}

typedef struct {
    braid_comm_t comm;
    int delay_ms;
} aborter_t;

static void *abort_later(void *arg)
{
    aborter_t *a = arg;
    usleep((useconds_t)a->delay_ms * 1000);
    braid_comm_abort(a->comm);
    return NULL;
}

static int abort_from_thread(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    (void)n;
    float x[4] = {1, 2, 3, 4};
    if (rank == 0) {
        aborter_t a = {.comm = comm, .delay_ms = 300};
        pthread_t t;
        pthread_create(&t, NULL, abort_later, &a);
        double t0 = now_s();
        braid_result_t r = braid_allreduce(x, x, 4, BRAID_FLOAT32, BRAID_SUM, comm);
        double el = now_s() - t0;
        pthread_join(t, NULL);
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "got %s", braid_strerror(r));
        MP_CHECK(rank, el < 2.0, "abort took %.2f s to return", el);
        MP_CHECK(rank, braid_barrier(comm) == BRAID_ERR_ABORTED, "aborted comm still works");
    } else {
        usleep(1500 * 1000); /* rank 0 is blocked in allreduce meanwhile */
        braid_result_t r = braid_allreduce(x, x, 4, BRAID_FLOAT32, BRAID_SUM, comm);
        MP_CHECK(rank, r == BRAID_ERR_REMOTE || r == BRAID_ERR_ABORTED,
                 "peer of an aborted rank got %s", braid_strerror(r));
    }
    return 0;
}

Test(fault, abort_from_another_thread_unblocks_the_wait)
{
    /* The ring: under recursive doubling rank 0's only message is already delivered when it
     * aborts, and rank 1 then completes its all-reduce correctly. */
    setenv("BRAID_ALGO", "ring", 1);
    cr_assert_eq(mp_run(2, abort_from_thread, NULL, 30), 0);
    unsetenv("BRAID_ALGO");
}

static int mismatched(braid_comm_t comm, int rank, int n, void *arg)
{
    int kind = *(int *)arg;
    (void)n;
    float buf[300] = {0};
    braid_result_t r;
    if (kind == 0) /* same collective, different counts */
        r = braid_allreduce(buf, buf, rank ? 200 : 100, BRAID_FLOAT32, BRAID_SUM, comm);
    else if (rank == 0) { /* different collectives */
        /* The root only sends, so it may finish before the peer sees the mismatch: then its
         * next call must fail with it. */
        r = braid_broadcast(buf, buf, 100, BRAID_FLOAT32, 0, comm);
        if (r == BRAID_SUCCESS) r = braid_barrier(comm);
    } else
        r = braid_allreduce(buf, buf, 100, BRAID_FLOAT32, BRAID_SUM, comm);
    MP_CHECK(rank, r == BRAID_ERR_MISMATCH, "got %s: %s", braid_strerror(r), braid_last_error());
    const char *m = braid_last_error();
    if (kind == 0)
        MP_CHECK(rank, strstr(m, "count 100") && strstr(m, "count 200"), "message: %s", m);
    else if (rank == 1)
        MP_CHECK(rank, strstr(m, "broadcast") && strstr(m, "allreduce"), "message: %s", m);
    else /* the root sees the peer's allreduce against its own next call */
        MP_CHECK(rank, strstr(m, "rank 1 called allreduce"), "message: %s", m);
    return 0;
}

Test(fault, mismatched_collectives_name_both_calls)
{
    int kind = 0;
    cr_assert_eq(mp_run(2, mismatched, &kind, 30), 0);
    kind = 1;
    cr_assert_eq(mp_run(2, mismatched, &kind, 30), 0);
    kind = 0;
    cr_assert_eq(mp_run(3, mismatched, &kind, 30), 0);
}

/* Queued sends that fail (the receiver destroys its communicator without receiving): the
 * worker fails the communicator and tells the peers before it completes any request, so a
 * caller whose wait returned the error finds the communicator failed already (and no peer
 * still reads a buffer handed back). The wait is on an early request of the batch: the
 * worker completes the 4000 after it meanwhile. */
static int failed_isends(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    enum { N = 4096, W = 64 }; /* W: past the sends the slots took */
    static float x[N];
    if (rank == 1) {
        struct timespec ts = {0, 200 * 1000000L}; /* rank 0's sends fill the slots */
        nanosleep(&ts, NULL);
        return 0; /* destroys the communicator: rank 0's sends fail */
    }
    static braid_request_t q[N];
    for (int i = 0; i < N; i++)
        MP_OK(rank, braid_isend(&x[i], 1, BRAID_FLOAT32, 1, comm, &q[i]));
    braid_result_t r = braid_wait(q[W]), err = BRAID_SUCCESS;
    const char *msg = NULL;
    MP_OK(rank, braid_comm_get_error(comm, &err, &msg));
    MP_CHECK(rank, r == BRAID_ERR_REMOTE, "wait: %s: %s", braid_strerror(r), braid_last_error());
    MP_CHECK(rank, err == BRAID_ERR_REMOTE && strstr(msg, "rank 1"),
             "the communicator had not failed when the request completed: %s: %s",
             braid_strerror(err), msg ? msg : "");
    for (int i = 0; i < N; i++)
        if (i != W) braid_wait(q[i]);
    return 0;
}

Test(fault, a_failed_queued_send_completes_after_the_communicator_failed)
{
    for (int k = 0; k < 5; k++)
        cr_assert_eq(mp_run(2, failed_isends, NULL, 30), 0, "run %d", k);
}
