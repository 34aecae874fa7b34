/* The per-communicator worker thread that runs non-blocking operations in order. */
#ifndef BRAID_CORE_WORKER_H
#define BRAID_CORE_WORKER_H

#include "core/comm.h"

/* Queues req (started lazily); the worker runs it with braid_coll_execute. */
braid_result_t braid_worker_submit(struct braid_comm *comm, struct braid_request *req);
/* Wakes the worker (abort). */
void braid_worker_wake(struct braid_comm *comm);
/* Aborts queued work, joins the worker. */
void braid_worker_stop(struct braid_comm *comm);
/* Number of queued or running operations. */
int braid_worker_pending(struct braid_comm *comm);

/* Completes a queued request: result, message, done, one operation less pending. Requests
 * are completed under a process-wide lock (worker.c), never the communicator's. */
void braid_worker_complete(struct braid_comm *comm, struct braid_request *req, braid_result_t res,
                           const char *msg);
/* Completes a request that was never queued (calloc'd: braid_wait/test accept it). */
void braid_request_complete(struct braid_comm *comm, struct braid_request *req, braid_result_t res,
                            const char *msg);

/* Runs one validated collective on the calling thread (coll.c): takes the next sequence
 * number, runs the engine, records a failure as the comm's sticky error and tells peers. */
braid_result_t braid_coll_execute(struct braid_comm *comm, const braid_op_args_t *a);
/* How many braid_coll_execute calls the calling thread is inside (0: none). A wait inside one
 * (the hierarchical all-reduce's stages on their sub-communicators) leaves the queue to the
 * worker, whose running it alongside is the overlap (worker.c). */
int braid_coll_running(void);
/* The argument checks of every collective (coll.c); sets a->on_device (coll_dev.c). */
braid_result_t braid_coll_validate(struct braid_comm *comm, braid_op_args_t *a);
/* Runs validated arguments as the blocking form does (in order after queued operations). */
braid_result_t braid_coll_submit(struct braid_comm *comm, const braid_op_args_t *a);
/* Classifies sendbuf/recvbuf (the ones the call uses) as host or device memory: sets
 * a->on_device, or an error naming the buffer (coll_dev.c). */
braid_result_t braid_coll_check_device(struct braid_comm *comm, braid_op_args_t *a, int has_send,
                                       int has_recv);

/* A call that argument checks refused (res, with its message set) on a live communicator:
 * takes its call number anyway and tells the peers (coll.c); returns res. The general form
 * takes the call's descriptor and the exchange that tells the peers (BRAID_SUCCESS when every
 * peer rejected its call of that number too, else the error naming both calls). */
typedef braid_result_t (*braid_reject_fn)(struct braid_comm *comm, const braid_msg_hdr_t *desc,
                                          const char *reason, const void *arg);
braid_result_t braid_call_reject(struct braid_comm *comm, braid_msg_hdr_t desc, braid_result_t res,
                                 braid_reject_fn exchange, const void *arg);
braid_result_t braid_coll_reject(struct braid_comm *comm, const braid_op_args_t *a,
                                 braid_result_t res);

#endif
