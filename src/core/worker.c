/* The worker thread: runs queued non-blocking collectives in order, one at a time, and
 * completes their requests. Started on first use, stopped by braid_comm_destroy. */
#include "core/worker.h"
#include "core/log.h"
#include "cuda/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *worker_main(void *arg)
{
    struct braid_comm *comm = arg;
    braid_comm_thread_start(comm, "worker");
    pthread_mutex_lock(&comm->q_lock);
    for (;;) {
        while (!comm->q_head && !comm->worker_stop)
            pthread_cond_wait(&comm->q_cond, &comm->q_lock);
        if (!comm->q_head && comm->worker_stop) break;
        struct braid_request *req = comm->q_head;
        comm->q_head = req->next;
        if (!comm->q_head) comm->q_tail = NULL;
        pthread_mutex_unlock(&comm->q_lock);

        braid_clear_error();
        braid_result_t res;
        if (req->cuda_event) /* runs, or (stopping) only releases its stream */
            res = braid_cuda_run_queued(comm, req);
        else if (comm->worker_stop)
            res = braid_set_error(BRAID_ERR_ABORTED,
                                  "communicator destroyed before the operation ran");
        else
            res = braid_coll_execute(comm, &req->args);
        snprintf(req->errmsg, sizeof(req->errmsg), "%s", braid_last_error());

        pthread_mutex_lock(&comm->q_lock);
        req->result = res;
        atomic_store(&req->done, 1);
        comm->q_pending--;
        pthread_cond_broadcast(&comm->q_cond);
        if (req->detached) free(req);
    }
    pthread_mutex_unlock(&comm->q_lock);
    return NULL;
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
    }
    req->next = NULL;
    if (comm->q_tail)
        comm->q_tail->next = req;
    else
        comm->q_head = req;
    comm->q_tail = req;
    comm->q_pending++;
    pthread_cond_broadcast(&comm->q_cond);
    pthread_mutex_unlock(&comm->q_lock);
    return BRAID_SUCCESS;
}

int braid_worker_pending(struct braid_comm *comm)
{
    pthread_mutex_lock(&comm->q_lock);
    int n = comm->q_pending;
    pthread_mutex_unlock(&comm->q_lock);
    return n;
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

static braid_result_t finish(struct braid_request *req)
{
    braid_result_t res = req->result;
    if (res < 0) braid_set_error(res, "%s", req->errmsg);
    free(req);
    return res;
}

braid_result_t braid_wait(braid_request_t req)
{
    if (!req) return braid_set_error(BRAID_ERR_INVALID_ARG, "req is NULL");
    struct braid_comm *comm = req->comm;
    pthread_mutex_lock(&comm->q_lock);
    while (!atomic_load(&req->done))
        pthread_cond_wait(&comm->q_cond, &comm->q_lock);
    pthread_mutex_unlock(&comm->q_lock);
    return finish(req);
}

braid_result_t braid_test(braid_request_t req, int *done_p)
{
    if (!req) return braid_set_error(BRAID_ERR_INVALID_ARG, "req is NULL");
    if (!done_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "done_p is NULL");
    struct braid_comm *comm = req->comm;
    pthread_mutex_lock(&comm->q_lock);
    int done = atomic_load(&req->done);
    pthread_mutex_unlock(&comm->q_lock);
    *done_p = done;
    return done ? finish(req) : BRAID_SUCCESS;
}
