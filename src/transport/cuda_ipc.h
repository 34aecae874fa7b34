/* The CUDA IPC transport: receiver regions of the device engine (cuda/devplan.h: FIFOs of
 * slots and their control blocks) in device memory, shared with the ranks of one host that
 * write into them. Each rank allocates its region (cudaMalloc, zeroed) and exports it with
 * cudaIpcGetMemHandle; the infos go through the bootstrap (an allgather, cuda/executor.c);
 * each rank then maps its peers' regions with cudaIpcOpenMemHandle, or, for a peer in its own
 * process (several communicators of one process), uses the peer's pointer as it is (CUDA
 * refuses to open a handle in the process that exported it). The device engine's kernels then
 * write straight into the peers' slots and flags.
 *
 * This is not a transport of transport.h's vtable: that data path is driven by host code
 * (send_get / send_post ...), while here the kernels move every byte and flag; the vtable's
 * setup shape is kept (a receiver-side info blob, the sender maps it). Compiled with CUDA. */
#ifndef BRAID_TRANSPORT_CUDA_IPC_H
#define BRAID_TRANSPORT_CUDA_IPC_H

#include "braid/braid.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t handle[64]; /* cudaIpcMemHandle_t */
    uint64_t ptr;       /* the region's address in the exporting process */
    uint64_t bytes;
    uint64_t proc; /* a random token of the exporting process (same process: use ptr) */
    int32_t pid;
    int32_t dev; /* its device ordinal */
    int32_t ok;  /* 0: this rank has no region; why says why */
    char why[180];
} braid_cuda_ipc_info_t;

/* This process's token (random, made once). */
uint64_t braid_cuda_ipc_proc_token(void);
/* Allocates and zeroes a region of bytes on the current device and fills info (ok = 1); on
 * failure info->ok = 0 with the reason, and the error is returned. The zeroing runs on stream
 * (the engine's, non-blocking) and is waited for, bounded by timeout_s, before the handle is
 * made: the peers write into the region as soon as they have it, and the legacy default
 * stream (cudaMemset's) is not ordered with their kernels or ours, and may be held by a user's
 * blocking stream. A region whose zeroing did not finish is leaked, not freed. */
braid_result_t braid_cuda_ipc_region_alloc(size_t bytes, void *stream, double timeout_s,
                                           void **region_p, braid_cuda_ipc_info_t *info);
void braid_cuda_ipc_region_free(void *region);
/* Maps peer's region into this process (*opened_p = 1: unmap with region_close), or takes its
 * pointer when it is this process's own. Errors name the peer rank. */
braid_result_t braid_cuda_ipc_region_open(const braid_cuda_ipc_info_t *peer, int peer_rank,
                                          void **region_p, int *opened_p);
void braid_cuda_ipc_region_close(void *region, int opened);

#endif
