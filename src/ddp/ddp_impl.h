/* Internal state of the DDP layer (src/ddp). Only include/braid/braid.h and ddp.h are used:
 * this layer sits on braid's public API like any other user. */
#ifndef BRAID_DDP_IMPL_H
#define BRAID_DDP_IMPL_H

#include "braid/ddp.h"

#include <stdarg.h>

/* One flat bucket: the gradients of nparams parameters back to back, one dtype. */
typedef struct {
    size_t count, bytes;
    braid_datatype_t dtype;
    int nparams;
    int *params; /* parameter indices in offset order */
    void *data;  /* bytes, 64-byte aligned */
    int pending; /* this step: parameters not ready yet */
    int launched, done;
    int stage;           /* hooks with next(): 1 once next() ran this step (req is then next's) */
    braid_request_t req; /* in flight when launched && !done (NULL: completed in launch) */
    double t_ready, t_launch, t_done;
    /* ZeRO-1: count padded to nranks * shard; pdata holds the parameters, flat like data */
    size_t shard, padded;
    void *pdata;
    /* ZeRO-2: data is the staging buffer held this step (NULL when none), slot its index;
     * sgrad holds the owned shard's reduced gradients */
    int slot;
    void *sgrad;
} ddp_bucket_t;

struct braid_ddp {
    braid_comm_t comm;
    int rank, nranks;
    int nparams;
    braid_ddp_param_t *params; /* copies; with grad_as_bucket_view .grad points into a bucket */
    int *ready;                /* this step */
    int *accum;                /* readied under no_sync since the last reduction (accumulated) */
    int *pbucket;              /* bucket of each parameter */
    size_t *poff;              /* element offset in it */
    int nbuckets;
    ddp_bucket_t *buckets;
    int next_launch; /* first bucket not started this step */
    int next_done;   /* first bucket not completed this step */
    int nready;      /* parameters ready this step */
    braid_ddp_options_t opts;
    braid_ddp_hook_t hook;
    int no_sync;
    braid_result_t failed; /* sticky: the first communicator/hook error */
    char failmsg[1024];
    int default_hook; /* hook.launch is the default all-reduce (its bytes are counted) */
    unsigned long long sent_bytes, steps;
    /* ZeRO-2 staging pool: nstaging slots; slot k holds staging[k] (NULL until first used) of
     * stcap[k] bytes, owner[k] = the bucket holding it this step or -1. Slots 0..nfixed-1:
     * bucket b's own slot is b % staging_buffers, of the largest size among its buckets;
     * later slots: extras, each of the size of the bucket that needed it. */
    void **staging;
    size_t *stcap;
    int *owner;
    int nstaging, nfixed;
};

/* Bucket assignment (bucket.c): fills pbucket/poff and buckets[].{count,bytes,dtype,nparams,
 * params}; returns the number of buckets, or -1 when out of memory. Pure. */
int ddp_assign_buckets(const braid_ddp_param_t *params, int nparams, size_t first_cap, size_t cap,
                       int *pbucket, size_t *poff, ddp_bucket_t **buckets_p);

/* The thread's message (ddp.c). Returns res. */
braid_result_t ddp_set_error(braid_result_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

double ddp_now(void);

/* ZeRO-1 (zero.c): copies the registered parameters into the buckets' flat copies. */
void ddp_zero_load_params(struct braid_ddp *d);

/* Ring-algorithm bytes a rank sends: all-reduce of bytes (mult 2) or reduce-scatter /
 * all-gather (mult 1). */
unsigned long long ddp_ring_bytes(const struct braid_ddp *d, size_t bytes, int mult);

/* Waits for bucket next_done (launched) and completes it (ddp.c); BRAID_ERR_INTERNAL if no
 * bucket is in flight. */
braid_result_t ddp_wait_next(struct braid_ddp *d);

/* After a failure that started on this rank (a hook's or a start's error, out of memory),
 * peers may be waiting in a collective this rank will never join: aborts comm so that they
 * fail promptly instead of at their timeout. Errors that came from the communicator's peers
 * (BRAID_ERR_REMOTE, BRAID_ERR_ABORTED) are already known to them: no abort, so their
 * messages keep naming the rank that caused them. */
void ddp_abort_peers(braid_comm_t comm, braid_result_t res);

/* ZeRO-2 (zero2.c): allocation of the shard gradients at creation; the staging buffer for
 * bucket b this step (taking one, waiting or growing the pool); its release on completion;
 * freeing. */
int ddp_zero2_alloc(struct braid_ddp *d);
braid_result_t ddp_zero2_acquire(struct braid_ddp *d, int b);
void ddp_zero2_release(struct braid_ddp *d, int b);
void ddp_zero2_free(struct braid_ddp *d);

#endif
