/* The per-communicator CUDA state (private to src/cuda and the cuda-ipc transport). */
#ifndef BRAID_CUDA_CUDA_COMM_H
#define BRAID_CUDA_CUDA_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define BRAID_CUDA_MAX_RETIRED 40

struct braid_cuda_comm {
    int dev; /* the communicator's device */
    pthread_mutex_t lock;
    /* Staging (stage.c): pinned host memory the device buffers go through. */
    void *stage;
    size_t stage_bytes;
    void *retired[BRAID_CUDA_MAX_RETIRED]; /* outgrown areas a held stream may still use */
    int nretired;
    void *copy_stream; /* cudaStream_t (non-blocking) of the staging copies */
    /* Stream-ordered operations (stream.c): a pinned, device-mapped counter the user streams
     * wait on (cuStreamWaitValue64 >= ticket); the worker stores each finished ticket. */
    volatile uint64_t *flag;
    uint64_t flag_dev; /* its device address (CUdeviceptr) */
    uint64_t next_ticket;
    /* The device engine (executor.c): NULL until the first collective on device buffers. */
    struct braid_cuda_engine *eng;
    int eng_state; /* 0 not tried, 1 ready, -1 unavailable (staged), see executor.c */
    char eng_why[200];
};

struct braid_comm;
struct braid_op_args;
/* executor.c: runs a validated collective on device buffers on the device engine. Returns
 * BRAID_INPROGRESS (1) when the engine does not apply (the caller stages it through the host),
 * else the result (the result is in place on success). */
int braid_cuda_engine_try(struct braid_comm *comm, const struct braid_op_args *a);
/* On the caller's thread of a call the worker will run (stream-ordered, before its stream is
 * held, or non-blocking; braid_cuda_prepare_queued, on cc->dev), the device
 * engine's setup when this call is the first to need it (after the comm's queued operations,
 * as the setup is collective). Returns 1 when the engine will run the call, 0 when it will be
 * staged, or an error (executor.c). */
int braid_cuda_engine_prepare(struct braid_comm *comm, const struct braid_op_args *a);
/* The staging area sized for a (stage.c; same thread and moment). */
braid_result_t braid_cuda_stage_prepare(struct braid_comm *comm, const struct braid_op_args *a);
void braid_cuda_engine_free(struct braid_comm *comm);

#endif
