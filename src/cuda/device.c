/* The CUDA side of braid's host code (C over the static CUDA runtime): device detection,
 * pointer classification, copies and pinned memory. See cuda.h.
 *
 * Nothing here runs at load time: the runtime is first touched by braid_cuda_ndevices (once
 * per process, pthread_once), so a CUDA build starts on a machine without a driver and behaves
 * as a CPU build there. That first touch sets CUDA_DEVICE_MAX_CONNECTIONS=32 unless it is set,
 * where NVIDIA's driver shows (see probe). libbraid never links libcuda: driver functions braid
 * needs (stream memory operations, VMM) are fetched with cudaGetDriverEntryPointByVersion
 * (braid_cuda_driver_fn in stream.c and the transport). */
#include "cuda/cuda.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_ndev;
static char probe_why[200] = "not probed";
static int (*_Atomic test_classifier)(const void *p);

int braid_cuda_built(void)
{
    return 1;
}

static _Atomic int test_driver; /* tests: 1 pretends NVIDIA's device nodes exist */

void braid_cuda_test_set_driver_present(int yes)
{
    test_driver = yes;
}

/* NVIDIA's driver is loaded (its control device or its /proc directory; WSL's GPU device). */
static int driver_present(void)
{
    static const char *const marks[] = {"/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg"};
    if (test_driver) return 1;
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
        if (access(marks[i], F_OK) == 0) return 1;
    return 0;
}

static void probe(void)
{
    const char *want = braid_param_str("CUDA");
    if (want[0] == '0' && want[1] == '\0') {
        snprintf(probe_why, sizeof(probe_why), "disabled by BRAID_CUDA=0");
        return;
    }
    /* Stream-ordered calls hold the caller's stream in the GPU's front end until the worker
     * has run them (stream.c). With more streams in use than hardware work queues
     * (CUDA_DEVICE_MAX_CONNECTIONS, 8 unless set), an engine kernel can be queued behind
     * another communicator's held stream, and that stream waits for the kernel: on the H200,
     * 4-8 communicators in one process hung so, and ran with 32 queues (perf/RESULTS.md, GPU,
     * session 26). The driver reads the variable when it creates the context, which has not
     * happened yet unless the program touched CUDA before braid; a value the user set stays.
     * setenv is not safe against other threads' getenv (it may move the environment under
     * them), so it runs only where a context can follow: NVIDIA's driver shows. */
    if (driver_present() && !getenv("CUDA_DEVICE_MAX_CONNECTIONS"))
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* 35 insufficient driver (none installed), 34 the stub libcuda, 100 no device. */
        snprintf(probe_why, sizeof(probe_why), "no usable CUDA device (%s: %s)",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        (void)cudaGetLastError();
        return;
    }
    if (n <= 0) {
        snprintf(probe_why, sizeof(probe_why), "no CUDA device (the driver reports 0)");
        return;
    }
    probe_ndev = n;
    snprintf(probe_why, sizeof(probe_why), "%d CUDA device(s)", n);
    braid_debug(INIT, "cuda: %d device(s) visible", n);
}

int braid_cuda_ndevices(const char **why_p)
{
    pthread_once(&probe_once, probe);
    if (why_p) *why_p = probe_why;
    return probe_ndev;
}

int braid_cuda_current_device(void)
{
    if (braid_cuda_ndevices(NULL) == 0) return -1;
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return d;
}

void braid_cuda_test_set_classifier(int (*fn)(const void *p))
{
    atomic_store(&test_classifier, fn);
}

int braid_cuda_ptr_device(const void *p)
{
    int (*fn)(const void *) = atomic_load_explicit(&test_classifier, memory_order_relaxed);
    if (fn) return fn(p);
    if (!p) return -1;
    if (probe_ndev == 0) {
        /* The probe runs at communicator init; before it: host. With no device of braid's
         * own, the program's driver may still know the pointer (drvptr.c). */
        return braid_cuda_drv_ptr_device(p);
    }
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    if (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged) return at.device;
    return -1;
}

braid_result_t braid_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream)
{
    if (!bytes || dst == src) return BRAID_SUCCESS;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a later launch's check must not see it */
        return braid_set_error(BRAID_ERR_SYSTEM, "cudaMemcpy of %zu bytes failed: %s", bytes,
                               cudaGetErrorString(e));
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_stream_drain(void *stream, double timeout_s, _Atomic int *aborted,
                                       const char *what)
{
    uint64_t t0 = braid_now_ns(), limit = braid_timeout_ns(timeout_s);
    struct timespec nap = {0, 20000};
    for (;;) {
        cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
        if (e == cudaSuccess) return BRAID_SUCCESS;
        if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return braid_set_error(BRAID_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e));
        }
        if (aborted && atomic_load(aborted))
            return braid_set_error(BRAID_ERR_ABORTED, "%s: aborted while the device worked", what);
        if (braid_now_ns() - t0 > limit)
            return braid_set_error(BRAID_ERR_TIMEOUT,
                                   "%s: the device work did not finish in %.1f s", what, timeout_s);
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 1000000) nap.tv_nsec *= 2;
    }
}

braid_result_t braid_cuda_device_enter(int dev, int *prev_p)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        prev = -1;
    }
    if (prev != dev && cudaSetDevice(dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_SYSTEM, "cannot select CUDA device %d", dev);
    }
    *prev_p = prev;
    return BRAID_SUCCESS;
}

void braid_cuda_device_restore(int prev, int dev)
{
    if (prev >= 0 && prev != dev && cudaSetDevice(prev) != cudaSuccess) (void)cudaGetLastError();
}

braid_result_t braid_cuda_dev_alloc(void **p_p, size_t bytes)
{
    cudaError_t e = cudaMalloc(p_p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p_p = NULL;
        return braid_set_error(e == cudaErrorMemoryAllocation ? BRAID_ERR_NOMEM : BRAID_ERR_SYSTEM,
                               "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_dev_free(void *p)
{
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_INVALID_ARG, "cudaFree(%p) failed: %s", p,
                               cudaGetErrorString(e));
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_cuda_host_alloc(void **p_p, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return braid_set_error(BRAID_ERR_NOMEM, "cudaMallocHost of %zu bytes failed: %s", bytes,
                               cudaGetErrorString(e));
    }
    *p_p = p;
    return BRAID_SUCCESS;
}

void braid_cuda_host_free(void *p)
{
    if (p) cudaFreeHost(p);
}
