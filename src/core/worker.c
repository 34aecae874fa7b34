/* The worker thread: runs queued non-blocking collectives in order, one at a time, and
 * completes their requests. Started on first use, stopped by braid_comm_destroy.
 *
 * A thread that waits for a queued collective (braid_wait) runs the queue itself meanwhile,
 * as MPI_Wait progresses MPI's: when nobody runs one, it takes the next host collective at the
 * head and runs it on its own thread, until its request is done; the worker leaves such
 * collectives to it while it waits and for HELP_GRACE_NS after it returned (a program that
 * waits for its requests one after the other comes back for the next at once). Without that,
 * the waiter slept and was woken once per completion: eight 8-byte braid_iallreduce calls
 * waited for together took 7 us per call on 2 ranks against 0.3 for blocking ones (two
 * context switches per call; perf/RESULTS.md). Only the worker runs point-to-point tasks,
 * groups and device or stream-ordered operations (its thread holds their state).
 *
 * Requests are independent of their communicator once complete: completion is published
 * under one process-wide lock (req_lock / req_cond), so braid_test never touches the
 * communicator, which may have been destroyed (destroy completes every queued request first),
 * and braid_wait only after entering it through the registry (a destroyed one is refused
 * there, and a destroy waits for the waiter to leave). A request that braid_wait / braid_test
 * returned is not freed at once but kept in a quarantine of the last REQ_QUARANTINE ones, marked
 * FREED, so a second wait on its handle is refused (BRAID_ERR_INVALID_USAGE) instead of reading
 * memory malloc gave to someone else. */
#include "core/worker.h"
#include "core/log.h"
#include "cuda/cuda.h"
#include "core/p2p.h"

#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t req_cond = PTHREAD_COND_INITIALIZER;

#define REQ_QUARANTINE 256
static struct braid_request *req_quarantine[REQ_QUARANTINE];
static size_t req_quarantine_n;

static void req_complete(struct braid_request *req, braid_result_t res)
{
    pthread_mutex_lock(&req_lock);
    req->result = res;
    req->done_ns = braid_now_ns();
    atomic_store(&req->done, 1);
    pthread_cond_broadcast(&req_cond);
    pthread_mutex_unlock(&req_lock);
}

static void req_retire(struct braid_request *req)
{
    atomic_store(&req->state, BRAID_REQ_FREED);
    pthread_mutex_lock(&req_lock);
    struct braid_request *old = req_quarantine[req_quarantine_n % REQ_QUARANTINE];
    req_quarantine[req_quarantine_n++ % REQ_QUARANTINE] = req;
    pthread_mutex_unlock(&req_lock);
    if (old) braid_task_free(old->task);
    free(old);
}

#define HELP_GRACE_NS 50000ull
/* While a waiter runs the queue the worker looks every HELP_POLL_NS: with 200 us its wake-ups
 * cost 3 us per call of 8 x 8-byte i-forms on 4 ranks on 2 cpus (8.0 against 5.0-5.5 us); a
 * request a waiter left queued starts within this. */
#define HELP_POLL_NS 1000000ull

/* A queued operation a waiting thread may run: a collective on host buffers. */
static int helpable(const struct braid_request *r)
{
    return r && !r->task && !r->cuda_event && !r->detached && !r->args.on_device;
}

/* Pops the head (under q_lock) for the caller to run. */
static struct braid_request *pop(struct braid_comm *comm)
{
    struct braid_request *req = comm->q_head;
    comm->q_head = req->next;
    if (!comm->q_head) comm->q_tail = NULL;
    comm->q_running = 1;
    return req;
}

/* Runs a popped request and completes it (called without q_lock, returns with it held): no
 * longer running, and the threads waiting for that told. */
static void run_popped(struct braid_comm *comm, struct braid_request *req)
{
    braid_clear_error();
    if (req->task) { /* point-to-point work: completes its requests itself (p2p.h) */
        braid_task_execute(comm, req);
    } else {
        braid_result_t res;
        if (req->cuda_event) /* runs, or (stopping) only releases its stream */
            res = braid_cuda_run_queued(comm, req);
        else if (comm->worker_stop)
            res = braid_set_error(BRAID_ERR_ABORTED,
                                  "%s: the communicator was destroyed before "
                                  "the operation ran",
                                  braid_coll_name(req->args.coll));
        else
            res = braid_coll_execute(comm, &req->args);
        braid_str_fit(req->errmsg, sizeof(req->errmsg), braid_last_error());
        pthread_mutex_lock(&comm->q_lock);
        comm->q_pending--;
        pthread_mutex_unlock(&comm->q_lock);
        if (req->detached) /* stream-ordered: nobody waits on it */
            free(req);
        else
            req_complete(req, res); /* req may be freed by its waiter from here on */
    }
    pthread_mutex_lock(&comm->q_lock);
    comm->q_running = 0;
    /* helpers wait for this; the worker polls, but what only it runs must not wait for that */
    if (comm->q_help_waiting || (comm->q_head && !helpable(comm->q_head)))
        pthread_cond_broadcast(&comm->q_cond);
}

/* Whether the worker leaves the head to a waiting thread: one helps now, or one returned
 * within HELP_GRACE_NS (its program's next wait comes at once). */
static int left_to_helpers(const struct braid_comm *comm)
{
    if (!helpable(comm->q_head)) return 0;
    return comm->q_helpers > 0 ||
           (comm->q_helper_left_ns && braid_now_ns() - comm->q_helper_left_ns < HELP_GRACE_NS);
}

/* Sleeps on q_cond for at most ns (helpers neither wake the worker when they return nor at
 * the end of what they run: it looks again after ns). */
static void timed_wait(struct braid_comm *comm, uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* q_cond's clock (comm.c): no wall-clock steps */
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&comm->q_cond, &comm->q_lock, &ts);
}

static void *worker_main(void *arg)
{
    struct braid_comm *comm = arg;
    braid_comm_thread_start(comm, "worker");
    pthread_mutex_lock(&comm->q_lock);
    comm->worker_sleep = 0; /* braid_worker_submit waits for this: the thread is set up */
    pthread_cond_broadcast(&comm->q_cond);
    for (;;) {
        while (comm->q_running ||
               (!comm->worker_stop && (!comm->q_head || left_to_helpers(comm)))) {
            if (!comm->q_head) { /* braid_worker_submit wakes it */
                comm->worker_sleep = 1;
                pthread_cond_wait(&comm->q_cond, &comm->q_lock);
            } else { /* the grace after a helper returned, or a helper (or the run) still on */
                comm->worker_sleep = 2;
                timed_wait(comm, comm->q_running || comm->q_helpers ? HELP_POLL_NS : HELP_GRACE_NS);
            }
            comm->worker_sleep = 0;
        }
        if (!comm->q_head && comm->worker_stop) break;
        struct braid_request *req = pop(comm);
        pthread_mutex_unlock(&comm->q_lock);
        run_popped(comm, req);
    }
    pthread_mutex_unlock(&comm->q_lock);
    return NULL;
}

/* braid_wait's help (see the top): runs the queued host collectives at the head of req's
 * communicator while req is not done and nobody else runs one; returns when req is done, or
 * when the head is something only the worker runs (the caller then sleeps until req is). */
static void help(struct braid_request *req)
{
    struct braid_comm *comm = req->comm;
    /* Not inside a collective (hier's stages wait on their sub-communicators, whose workers
     * run alongside), nor for a real-time worker (BRAID_WORKER_RT: its thread runs first). */
    if (!comm || braid_coll_running()) return;
    char keep[2048]; /* the caller's last error: braid_wait leaves it as it was on success */
    braid_str_fit(keep, sizeof(keep), braid_last_error());
    int log_rank = braid_log_rank();
    if (braid_comm_enter(comm) < 0) { /* destroyed meanwhile: its worker completes req */
        braid_restore_error(keep);
        return;
    }
    if (comm->worker_rt > 0) {
        braid_comm_leave(comm);
        braid_log_set_rank(log_rank);
        return;
    }
    pthread_mutex_lock(&comm->q_lock);
    comm->q_helpers++;
    while (!atomic_load(&req->done) && !comm->worker_stop) {
        if (!comm->q_running && helpable(comm->q_head)) {
            struct braid_request *r = pop(comm);
            comm->q_helped++;
            pthread_mutex_unlock(&comm->q_lock);
            run_popped(comm, r);
            continue;
        }
        if (!comm->q_running) break; /* for the worker: it is not held back by us below */
        comm->q_help_waiting++;
        pthread_cond_wait(&comm->q_cond, &comm->q_lock); /* the runner broadcasts at its end */
        comm->q_help_waiting--;
    }
    comm->q_helpers--;
    /* Done: the grace (its program's next wait may come at once: waits for a burst of
     * requests in turn, where the worker ran the first). Otherwise, or with something at the
     * head only the worker runs, wake the worker. */
    comm->q_helper_left_ns = atomic_load(&req->done) ? braid_now_ns() : 0;
    if (comm->q_head && (!comm->q_helper_left_ns || !helpable(comm->q_head)))
        pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
    braid_comm_leave(comm);
    braid_log_set_rank(log_rank);
    braid_restore_error(keep); /* a collective run for another request may have set it */
}

void braid_worker_complete(struct braid_comm *comm, struct braid_request *req, braid_result_t res,
                           const char *msg)
{
    braid_str_fit(req->errmsg, sizeof(req->errmsg), msg ? msg : "");
    pthread_mutex_lock(&comm->q_lock);
    comm->q_pending--;
    pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
    req_complete(req, res);
}

void braid_request_complete(struct braid_comm *comm, struct braid_request *req, braid_result_t res,
                            const char *msg)
{
    (void)comm; /* completion never needs the communicator (it may be being destroyed) */
    braid_str_fit(req->errmsg, sizeof(req->errmsg), msg ? msg : "");
    req_complete(req, res);
}

braid_result_t braid_worker_submit(struct braid_comm *comm, struct braid_request *req)
{
    pthread_mutex_lock(&comm->q_lock);
    if (!comm->worker_started) {
        int rc = pthread_create(&comm->worker, NULL, worker_main, comm);
        if (rc) {
            pthread_mutex_unlock(&comm->q_lock);
            return braid_set_error(BRAID_ERR_SYSTEM, "cannot start the worker thread: %s",
                                   strerror(rc));
        }
        comm->worker_started = 1;
        /* Until it is set up (named, pinned, its slice): a waiter may run the first requests
         * itself, and what the thread is must not depend on whether it ran one. */
        comm->worker_sleep = -1;
        while (comm->worker_sleep == -1)
            pthread_cond_wait(&comm->q_cond, &comm->q_lock);
    }
    req->next = NULL;
    req->comm = comm;
    atomic_store(&req->state, BRAID_REQ_LIVE);
    if (comm->q_tail)
        comm->q_tail->next = req;
    else
        comm->q_head = req;
    comm->q_tail = req;
    comm->q_pending++;
    /* A running worker finds it when it is done. A polling one looks again within
     * HELP_POLL_NS (woken now only for what only it may run: waking it for the first of each
     * burst took 8 x 8-byte i-forms from 0.45 to 0.7-2 us per call on 2 ranks). */
    if (comm->worker_sleep == 1 || (comm->worker_sleep == 2 && !helpable(req)) || comm->worker_stop)
        pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
    return BRAID_SUCCESS;
}

/* Every blocking call asks this first, so it takes no lock: the worker's decrement follows the
 * operation's end (a read of 0 sees all it did), and only the caller's thread adds. */
int braid_worker_pending(struct braid_comm *comm)
{
    return atomic_load(&comm->q_pending);
}

void braid_worker_wake(struct braid_comm *comm)
{
    pthread_mutex_lock(&comm->q_lock);
    pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
}

void braid_worker_stop(struct braid_comm *comm)
{
    pthread_mutex_lock(&comm->q_lock);
    int started = comm->worker_started;
    comm->worker_stop = 1;
    if (comm->q_pending) atomic_store(&comm->aborted, 1);
    pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
    if (started) pthread_join(comm->worker, NULL);
    comm->worker_started = 0;
}

/* Takes the waiter's claim on req: one braid_wait / braid_test at a time, none after the
 * request was returned (FREED, in the quarantine). *queued_p = 1: a request of the worker's
 * queue (braid_worker_submit stamped it LIVE), which braid_wait may help along. */
static braid_result_t claim(struct braid_request *req, int *queued_p)
{
    if (!req) return braid_set_error(BRAID_ERR_INVALID_ARG, "req is NULL");
    uint32_t st = BRAID_REQ_LIVE;
    *queued_p = 1;
    if (atomic_compare_exchange_strong(&req->state, &st, BRAID_REQ_WAITING)) return BRAID_SUCCESS;
    *queued_p = 0;
    /* Made outside the queue (calloc'd, e.g. a group's request) and not stamped yet. */
    if (st == BRAID_REQ_NEW && atomic_compare_exchange_strong(&req->state, &st, BRAID_REQ_WAITING))
        return BRAID_SUCCESS;
    if (st == BRAID_REQ_FREED)
        return braid_set_error(BRAID_ERR_INVALID_USAGE,
                               "req %p was already completed by braid_wait / braid_test (a "
                               "request is waited on once)",
                               (void *)req);
    if (st == BRAID_REQ_WAITING)
        return braid_set_error(BRAID_ERR_INVALID_USAGE,
                               "req %p is being waited on by another thread", (void *)req);
    return braid_set_error(BRAID_ERR_INVALID_ARG, "req %p is not a braid request", (void *)req);
}

/* A request of this thread's open group completes at its braid_group_end, which the thread
 * cannot reach while it waits: refused instead of waiting forever (or testing forever). */
static braid_result_t open_group_check(struct braid_request *req, const char *fn)
{
    if (!braid_group_holds(req)) return BRAID_SUCCESS;
    return braid_set_error(BRAID_ERR_INVALID_USAGE,
                           "%s: req %p belongs to a group that is still open on this thread (it "
                           "completes at braid_group_end)",
                           fn, (void *)req);
}

static braid_result_t finish(struct braid_request *req, double *t_done_p)
{
    braid_result_t res = req->result;
    if (t_done_p) *t_done_p = (double)req->done_ns * 1e-9;
    if (res < 0) braid_set_error(res, "%s", req->errmsg);
    req_retire(req);
    return res;
}

braid_result_t braid_wait_time(braid_request_t req, double *t_done_p)
{
    int queued;
    BRAID_CHECK(open_group_check(req, "braid_wait"));
    BRAID_CHECK(claim(req, &queued));
    if (queued && helpable(req) && !atomic_load(&req->done)) help(req);
    pthread_mutex_lock(&req_lock);
    while (!atomic_load(&req->done))
        pthread_cond_wait(&req_cond, &req_lock);
    pthread_mutex_unlock(&req_lock);
    return finish(req, t_done_p);
}

braid_result_t braid_wait(braid_request_t req)
{
    return braid_wait_time(req, NULL);
}

braid_result_t braid_test_time(braid_request_t req, int *done_p, double *t_done_p)
{
    if (!done_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "done_p is NULL");
    *done_p = 0;
    BRAID_CHECK(open_group_check(req, "braid_test"));
    int queued;
    BRAID_CHECK(claim(req, &queued));
    pthread_mutex_lock(&req_lock);
    int done = atomic_load(&req->done);
    pthread_mutex_unlock(&req_lock);
    *done_p = done;
    if (done) return finish(req, t_done_p);
    atomic_store(&req->state, queued ? BRAID_REQ_LIVE : BRAID_REQ_NEW); /* as claim found it */
    return BRAID_SUCCESS;
}

braid_result_t braid_test(braid_request_t req, int *done_p)
{
    return braid_test_time(req, done_p, NULL);
}
