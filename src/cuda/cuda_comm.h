/* The per-communicator CUDA state (private to src/cuda and the cuda-ipc transport). */
#ifndef BRAID_CUDA_CUDA_COMM_H
#define BRAID_CUDA_CUDA_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct braid_cuda_comm {
    int dev; /* the communicator's device */
    pthread_mutex_t lock;
    /* Staging (stage.c): pinned host memory the device buffers go through. */
    void *stage;
    size_t stage_bytes;
    /* Stream-ordered operations (stream.c): a pinned, device-mapped counter the user streams
     * wait on (cuStreamWaitValue64 >= ticket); the worker stores each finished ticket. */
    volatile uint64_t *flag;
    uint64_t flag_dev; /* its device address (CUdeviceptr) */
    uint64_t next_ticket;
};

#endif
