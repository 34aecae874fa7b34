/* Exercises braid's threads for ThreadSanitizer (Criterion cannot run under TSan), each phase a
 * job of forked ranks (tests/common/mp.c):
 *   worker   2 ranks: non-blocking all-reduces run on the worker thread while the caller
 *            tests/waits and a second thread polls the communicator's state; then two threads
 *            wait for halves of them (waits run queued collectives: core/worker.c); then an
 *            abort from another thread interrupts a blocked call.
 *   hier     4 ranks on 2 fake hosts (BRAID_HOSTNAME, as tests/mp/test_hier.c does): the
 *            pipelined hierarchical all-reduce (src/algos/hier.c, from 2 x 4 MiB of body), whose
 *            inter-host all-reduce of a segment runs on the inter sub-communicator's worker
 *            thread (tcp, with its progress thread) while the calling thread runs the intra-host
 *            (shm) steps of the neighbouring segments; a poller reads the error state meanwhile.
 *            Results are checked against the reference of tests/common/data.c.
 *   hierkill the same, with rank 3 SIGKILLed in the middle of a pipelined all-reduce: every
 *            survivor gets an error naming it (no hang), and its fail path (fail both
 *            sub-communicators, wait for the queued inter-host step) runs under TSan.
 *   hierkill-shm  the same with the inter-host sub-communicator over shm (BRAID_HOSTNAME
 *            dropped after the first split, as in test_hier.c): the worker thread and the fail
 *            path then fail the same shm connections.
 *   destroy  2 ranks, shm, then destroy-tcp over tcp: rounds of a fresh communicator (split)
 *            that rank 0 destroys from another thread while its main thread is blocked in an
 *            all-reduce, with a non-blocking all-reduce queued behind it and a poller reading the
 *            communicator's state; the requests are waited on after the destroy. Then two
 *            threads call one communicator at once (one of them may be refused).
 *   thread_stress [PHASE...]     (default: all phases)
 * Exits 0 when every rank of every phase did. A TSan report fails the run: halt_on_error=1 is
 * the default here (__tsan_default_options), so the reporting rank exits 66 at once. */
#include "algos/algo.h"
#include "braid/braid.h"
#include "core/comm.h"
#include "data.h"
#include "mp.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Read by the TSan runtime (unused in other builds): stop at the first report, which makes the
 * rank exit non-zero even though ranks leave with _exit (no atexit summary). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "halt_on_error=1";
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    braid_comm_t comm;
    atomic_int stop;
} poll_arg_t;

static void *poller(void *arg)
{
    poll_arg_t *p = arg;
    while (!atomic_load(&p->stop)) {
        braid_result_t err;
        const char *msg;
        int r;
        braid_comm_get_error(p->comm, &err, &msg);
        braid_comm_rank(p->comm, &r);
        usleep(100);
    }
    return NULL;
}

static void *aborter(void *arg)
{
    usleep(200 * 1000);
    braid_comm_abort(arg);
    return NULL;
}

/* ---- worker: non-blocking calls, concurrent polling, abort from another thread ------------- */
typedef struct {
    braid_request_t *reqs;
    int n, bad;
} half_t;

static void *wait_half(void *arg)
{
    half_t *h = arg;
    for (int k = h->n - 1; k >= 0; k--)
        if (braid_wait(h->reqs[k]) != BRAID_SUCCESS) h->bad = 1;
    return NULL;
}

static int worker_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    poll_arg_t pa = {.comm = comm};
    pthread_t pt;
    MP_CHECK(rank, pthread_create(&pt, NULL, poller, &pa) == 0, "pthread_create");
    enum { K = 8, N = 5000 };
    float *bufs[K];
    braid_request_t reqs[K];
    int bad = 0;
    for (int round = 0; round < 20 && !bad; round++) {
        for (int k = 0; k < K; k++) {
            bufs[k] = malloc(N * sizeof(float));
            for (int i = 0; i < N; i++)
                bufs[k][i] = (float)(rank + i + k);
            if (braid_iallreduce(bufs[k], bufs[k], N, BRAID_FLOAT32, BRAID_SUM, comm, &reqs[k]))
                bad = 1;
        }
        for (int k = 0; k < K; k++) {
            int done = 0;
            while (!done && !bad)
                if (braid_test(reqs[k], &done)) bad = 1;
            for (int i = 0; i < N && !bad; i++)
                if (bufs[k][i] != (float)(1 + 2 * (i + k))) bad = 1;
            free(bufs[k]);
        }
    }
    /* Waits that run the queue (src/core/worker.c): two threads wait for halves of each
     * round's requests, each from its last, while the worker takes what they leave. */
    for (int round = 0; round < 20 && !bad; round++) {
        for (int k = 0; k < K; k++) {
            bufs[k] = malloc(N * sizeof(float));
            for (int i = 0; i < N; i++)
                bufs[k][i] = (float)(rank + i + k);
            if (braid_iallreduce(bufs[k], bufs[k], N / (k + 1), BRAID_FLOAT32, BRAID_SUM, comm,
                                 &reqs[k]))
                bad = 1;
        }
        half_t h = {reqs + K / 2, K - K / 2, 0};
        pthread_t wt;
        MP_CHECK(rank, pthread_create(&wt, NULL, wait_half, &h) == 0, "pthread_create");
        half_t mine = {reqs, K / 2, 0};
        wait_half(&mine);
        pthread_join(wt, NULL);
        bad |= h.bad | mine.bad;
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < N / (k + 1) && !bad; i++)
                if (bufs[k][i] != (float)(1 + 2 * (i + k))) bad = 1;
            free(bufs[k]);
        }
    }
    atomic_store(&pa.stop, 1);
    pthread_join(pt, NULL);
    MP_CHECK(rank, !bad, "wrong non-blocking all-reduce result or error: %s", braid_last_error());
    /* Abort from another thread while rank 0 is blocked (rank 1 does not call). */
    if (rank == 0) {
        pthread_t at;
        MP_CHECK(rank, pthread_create(&at, NULL, aborter, comm) == 0, "pthread_create");
        float x = 1;
        braid_result_t r = braid_allreduce(&x, &x, 1, BRAID_FLOAT32, BRAID_SUM, comm);
        pthread_join(at, NULL);
        MP_CHECK(rank, r == BRAID_ERR_ABORTED, "the aborted call returned %s", braid_strerror(r));
    } else {
        usleep(600 * 1000);
    }
    return 0;
}

/* ---- hier: the pipelined hierarchical all-reduce ------------------------------------------ */
enum { HIER_RANKS = 4, HIER_VICTIM = 3 };
static const int hier_host[HIER_RANKS] = {0, 1, 1, 0}; /* 2 fake hosts x 2, shuffled */
/* 9 MiB of floats (2 pipelined segments: hier.c pipelines from 2 x 4 MiB) and a tail. */
static const size_t hier_count = ((size_t)9 << 20) / 4 + 5;

/* Collectives started on the inter-host sub-communicator (one per pipelined segment). */
static uint32_t inter_calls(braid_comm_t c)
{
    braid_algo_state_t *st = ((struct braid_comm *)c)->algo_state;
    return st && st->inter ? st->inter->seq : 0;
}

/* A communicator on which this rank lives on fake host hier_host[rank] (BRAID_ALGO=hier). Unlike
 * mp_fake_host_comm alone, BRAID_HOSTNAME stays set: hier.c's own splits (at its first call)
 * read it again, so the inter-host sub-communicator runs over tcp, with its progress thread, as
 * between real hosts (without it, both sub-communicators would be shm). */
static braid_comm_t fake_host_comm(braid_comm_t comm, int rank, int inter_tcp)
{
    braid_comm_t c = mp_fake_host_comm(comm, rank, hier_host[rank], "hier");
    char name[32];
    snprintf(name, sizeof(name), "fake-%d", hier_host[rank]);
    if (inter_tcp) setenv("BRAID_HOSTNAME", name, 1);
    return c;
}

static int hier_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)arg;
    braid_comm_t c = fake_host_comm(comm, rank, 1);
    MP_CHECK(rank, c != NULL, "fake-host communicator");
    poll_arg_t pa = {.comm = c};
    pthread_t pt;
    MP_CHECK(rank, pthread_create(&pt, NULL, poller, &pa) == 0, "pthread_create");
    int bad = data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_SUM, hier_count, 0, 0, 41,
                                   "tsan hier");
    uint32_t first = inter_calls(c);
    bad = bad || data_check_allreduce(c, rank, n, BRAID_FLOAT32, BRAID_AVG, hier_count, 1, 0, 42,
                                      "tsan hier");
    atomic_store(&pa.stop, 1);
    pthread_join(pt, NULL);
    if (bad) return 1; /* data_check_allreduce said why */
    struct braid_comm *ci = (struct braid_comm *)c;
    MP_CHECK(rank, ci->algo_state->runs[BRAID_ALGO_HIER] == 2, "hier ran %llu of 2 all-reduces",
             (unsigned long long)ci->algo_state->runs[BRAID_ALGO_HIER]);
    /* Pipelined: each call queued its segments' inter-host steps on the worker thread. */
    MP_CHECK(rank,
             ci->algo_state->inter->worker_started && first >= 2 && inter_calls(c) >= 2 * first,
             "not pipelined: %u and %u inter-host calls, worker %s", first, inter_calls(c),
             ci->algo_state->inter->worker_started ? "started" : "never started");
    MP_OK(rank, braid_comm_destroy(c));
    return 0;
}

typedef struct {
    double delay_s;
} killer_arg_t;

static void *killer(void *arg)
{
    const killer_arg_t *k = arg;
    usleep((useconds_t)(k->delay_s * 1e6));
    raise(SIGKILL);
    return NULL;
}

/* One all-reduce that works, then the victim dies half-way through the next one (its duration
 * taken from the first); the survivors must get an error from a call, not hang. arg: non-NULL
 * for an inter-host sub-communicator over tcp, NULL for shm (then the worker thread and the
 * calling thread's fail path both fail the same shm connections). */
static int hierkill_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    braid_comm_t c = fake_host_comm(comm, rank, arg != NULL);
    MP_CHECK(rank, c != NULL, "fake-host communicator");
    float *buf = malloc(hier_count * sizeof(float));
    MP_CHECK(rank, buf != NULL, "out of memory");
    for (size_t i = 0; i < hier_count; i++)
        buf[i] = (float)((size_t)rank + i % 1000);
    double t0 = now_s();
    MP_OK(rank, braid_allreduce(buf, buf, hier_count, BRAID_FLOAT32, BRAID_SUM, c));
    killer_arg_t ka = {.delay_s = (now_s() - t0) / 2};
    pthread_t kt;
    if (rank == HIER_VICTIM)
        MP_CHECK(rank, pthread_create(&kt, NULL, killer, &ka) == 0, "pthread_create");
    braid_result_t res = BRAID_SUCCESS;
    int calls = 0;
    double t_last = now_s();
    for (; calls < 100 && res == BRAID_SUCCESS; calls++) {
        t_last = now_s();
        res = braid_allreduce(buf, buf, hier_count, BRAID_FLOAT32, BRAID_SUM, c);
    }
    free(buf);
    MP_CHECK(rank, rank != HIER_VICTIM, "the victim outlived %d all-reduces", calls);
    MP_CHECK(rank, res == BRAID_ERR_REMOTE || res == BRAID_ERR_TIMEOUT,
             "after the kill: %s (%s) at call %d", braid_strerror(res), braid_last_error(), calls);
    char victim[16];
    snprintf(victim, sizeof(victim), "rank %d ", HIER_VICTIM);
    MP_CHECK(rank, strstr(braid_last_error(), victim), "the error does not name the dead %s: %s",
             victim, braid_last_error());
    fprintf(stderr, "thread_stress: rank %d: call %d failed after %.2f s: %s\n", rank, calls,
            now_s() - t_last, braid_last_error());
    braid_comm_destroy(c);
    return 0;
}

/* ---- destroy: braid_comm_destroy from another thread during a call; two threads at once ---- */
typedef struct {
    braid_comm_t comm;
    int delay_ms;
} destroyer_t;

static void *destroyer(void *arg)
{
    destroyer_t *d = arg;
    usleep((useconds_t)d->delay_ms * 1000);
    braid_comm_destroy(d->comm);
    return NULL;
}

typedef struct {
    braid_comm_t comm;
    float *buf;
    size_t count;
    braid_result_t res;
} racer_t;

static void *racer(void *arg)
{
    racer_t *r = arg;
    r->res = braid_allreduce(r->buf, r->buf, r->count, BRAID_FLOAT32, BRAID_SUM, r->comm);
    return NULL;
}

static int destroy_fn(braid_comm_t comm, int rank, int n, void *arg)
{
    (void)n;
    (void)arg;
    size_t count = (size_t)1 << 19;
    float *a = calloc(count, sizeof(float)), *b = calloc(count, sizeof(float));
    MP_CHECK(rank, a && b, "out of memory");
    for (int round = 0; round < 6; round++) {
        braid_comm_t c;
        MP_OK(rank, braid_comm_split(comm, 0, rank, &c));
        if (rank == 0) {
            poll_arg_t pa = {.comm = c};
            pthread_t pt, dt;
            destroyer_t d = {.comm = c, .delay_ms = 50 + 20 * round};
            MP_CHECK(rank, pthread_create(&pt, NULL, poller, &pa) == 0, "pthread_create");
            MP_CHECK(rank, pthread_create(&dt, NULL, destroyer, &d) == 0, "pthread_create");
            braid_request_t req;
            braid_result_t q = braid_iallreduce(b, b, count, BRAID_FLOAT32, BRAID_SUM, c, &req);
            braid_result_t r = braid_allreduce(a, a, count, BRAID_FLOAT32, BRAID_SUM, c);
            pthread_join(dt, NULL);
            atomic_store(&pa.stop, 1);
            pthread_join(pt, NULL);
            MP_CHECK(rank, r != BRAID_SUCCESS, "round %d: the destroyed call succeeded", round);
            if (q == BRAID_SUCCESS) {
                r = braid_wait(req);
                MP_CHECK(rank, r == BRAID_ERR_ABORTED, "round %d: queued request: %s", round,
                         braid_strerror(r));
                MP_CHECK(rank, braid_wait(req) == BRAID_ERR_INVALID_USAGE,
                         "round %d: a second wait was accepted", round);
            }
        } else {
            usleep(400 * 1000);
            braid_result_t r = braid_allreduce(a, a, count, BRAID_FLOAT32, BRAID_SUM, c);
            MP_CHECK(rank, r != BRAID_SUCCESS, "round %d: the peer's call succeeded", round);
            braid_comm_destroy(c);
        }
    }
    /* Two threads of each rank race on one communicator: whatever the interleaving, no data
     * race; a refused call is BRAID_ERR_INVALID_USAGE. */
    braid_comm_t c;
    MP_OK(rank, braid_comm_split(comm, 0, rank, &c));
    racer_t r1 = {.comm = c, .buf = a, .count = 1000}, r2 = {.comm = c, .buf = b, .count = 1000};
    pthread_t t1, t2;
    MP_CHECK(rank, pthread_create(&t1, NULL, racer, &r1) == 0, "pthread_create");
    MP_CHECK(rank, pthread_create(&t2, NULL, racer, &r2) == 0, "pthread_create");
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    if (r1.res != BRAID_SUCCESS || r2.res != BRAID_SUCCESS) braid_comm_abort(c);
    braid_comm_destroy(c);
    free(a);
    free(b);
    return 0;
}

/* ---- driver -------------------------------------------------------------------------------- */
static int inter_tcp = 1; /* a non-NULL arg for hierkill_fn */

static int run_phase(const char *name, int n, mp_fn_t fn, void *arg, int victim)
{
    double t0 = now_s();
    mp_job_t job;
    mp_start(&job, n, fn, arg);
    mp_wait(&job, 120);
    int bad = 0;
    for (int r = 0; r < n; r++) {
        int st = job.status[r];
        int ok = r == victim ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                             : WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok) {
            fprintf(stderr, "thread_stress: %s: rank %d %s %d\n", name, r,
                    WIFEXITED(st) ? "exited" : "was killed by signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad = 1;
        }
    }
    printf("thread_stress: %s: %s (%.1f s)\n", name, bad ? "FAILED" : "ok", now_s() - t0);
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int n;
        mp_fn_t fn;
        void *arg;
        int victim;
    } phases[] = {{"worker", 2, worker_fn, NULL, -1},
                  {"hier", HIER_RANKS, hier_fn, NULL, -1},
                  {"hierkill", HIER_RANKS, hierkill_fn, &inter_tcp, HIER_VICTIM},
                  {"hierkill-shm", HIER_RANKS, hierkill_fn, NULL, HIER_VICTIM},
                  {"destroy", 2, destroy_fn, NULL, -1},
                  {"destroy-tcp", 2, destroy_fn, &inter_tcp, -1}};
    const int nphases = (int)(sizeof(phases) / sizeof(phases[0]));
    int rc = 0;
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (int p = 0; p < nphases; p++)
            known |= !strcmp(argv[a], phases[p].name);
        if (!known) {
            fprintf(stderr,
                    "thread_stress: unknown phase '%s' (worker, hier, hierkill, hierkill-shm, "
                    "destroy, destroy-tcp)\n",
                    argv[a]);
            return 2;
        }
    }
    /* Survivors of the kill must not wait the default 300 s on a rank that cannot answer. */
    setenv("BRAID_TIMEOUT", "20", 0);
    for (int p = 0; p < nphases; p++) {
        int want = argc == 1;
        for (int a = 1; a < argc; a++)
            want |= !strcmp(argv[a], phases[p].name);
        if (want && phases[p].fn == destroy_fn)
            setenv("BRAID_TRANSPORT", phases[p].arg ? "tcp" : "shm", 1);
        if (want)
            rc |= run_phase(phases[p].name, phases[p].n, phases[p].fn, phases[p].arg,
                            phases[p].victim);
        unsetenv("BRAID_TRANSPORT");
    }
    printf("thread_stress: %s\n", rc ? "FAILED" : "ok");
    return rc;
}
