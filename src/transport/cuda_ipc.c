/* The CUDA IPC transport (see cuda_ipc.h). */
#include "transport/cuda_ipc.h"
#include "core/log.h"
#include "cuda/cuda.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t token_once = PTHREAD_ONCE_INIT;
static uint64_t token;

static void make_token(void)
{
    if (getrandom(&token, sizeof(token), 0) != (ssize_t)sizeof(token)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        token = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
    }
    if (!token) token = 1;
}

uint64_t braid_cuda_ipc_proc_token(void)
{
    pthread_once(&token_once, make_token);
    return token;
}

braid_result_t braid_cuda_ipc_region_alloc(size_t bytes, void *stream, double timeout_s,
                                           void **region_p, braid_cuda_ipc_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->pid = (int32_t)getpid();
    info->proc = braid_cuda_ipc_proc_token();
    int dev = -1;
    void *p = NULL;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaGetDevice(&dev);
    const char *what = "cudaGetDevice";
    if (e == cudaSuccess) {
        what = "cudaMalloc";
        e = cudaMalloc(&p, bytes);
    }
    if (e == cudaSuccess) {
        what = "cudaMemsetAsync";
        e = cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream);
    }
    braid_result_t drained = BRAID_SUCCESS;
    if (e == cudaSuccess && (drained = braid_cuda_stream_drain(
                                 stream, timeout_s, NULL, "cuda-ipc: zeroing the region")) < 0) {
        /* Still queued or running: freeing it now could let the memset land in a later
         * allocation. Leaked. */
        snprintf(info->why, sizeof(info->why), "%s", braid_last_error());
        braid_warn(INIT, "%s; its %zu bytes of device memory are leaked", info->why, bytes);
        return braid_set_error(drained, "%s", info->why);
    }
    if (e == cudaSuccess) {
        what = "cudaIpcGetMemHandle";
        e = cudaIpcGetMemHandle(&h, p);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (p) cudaFree(p);
        snprintf(info->why, sizeof(info->why), "%s (%zu bytes on device %d): %s", what, bytes, dev,
                 cudaGetErrorString(e));
        return braid_set_error(BRAID_ERR_SYSTEM, "cuda-ipc: %s", info->why);
    }
    _Static_assert(sizeof(h) <= sizeof(info->handle), "cudaIpcMemHandle_t is 64 bytes");
    memcpy(info->handle, &h, sizeof(h));
    info->ptr = (uint64_t)(uintptr_t)p;
    info->bytes = bytes;
    info->dev = dev;
    info->ok = 1;
    *region_p = p;
    return BRAID_SUCCESS;
}

void braid_cuda_ipc_region_free(void *region)
{
    if (region) cudaFree(region);
}

braid_result_t braid_cuda_ipc_region_open(const braid_cuda_ipc_info_t *peer, int peer_rank,
                                          void **region_p, int *opened_p)
{
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
    if (peer->proc == braid_cuda_ipc_proc_token() && peer->pid == (int32_t)getpid()) {
        /* A communicator of this process: its pointer is ours (peer access across devices). */
        if (peer->dev != dev) {
            cudaError_t e = cudaDeviceEnablePeerAccess(peer->dev, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
                (void)cudaGetLastError();
                return braid_set_error(BRAID_ERR_UNSUPPORTED,
                                       "cuda-ipc: rank %d's region is on device %d, which device "
                                       "%d cannot access: %s",
                                       peer_rank, peer->dev, dev, cudaGetErrorString(e));
            }
            (void)cudaGetLastError();
        }
        *region_p = (void *)(uintptr_t)peer->ptr;
        *opened_p = 0;
        return BRAID_SUCCESS;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, peer->handle, sizeof(h));
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_SYSTEM,
                               "cuda-ipc: cannot map rank %d's region (pid %d, device %d) on "
                               "device %d: cudaIpcOpenMemHandle: %s",
                               peer_rank, peer->pid, peer->dev, dev, cudaGetErrorString(e));
    }
    *region_p = p;
    *opened_p = 1;
    return BRAID_SUCCESS;
}

void braid_cuda_ipc_region_close(void *region, int opened)
{
    if (region && opened) cudaIpcCloseMemHandle(region);
}
