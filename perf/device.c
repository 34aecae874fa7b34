/* --device for the braid perf tools: buffers in CUDA device memory (cudaMalloc in the tool's
 * own CUDA runtime, as an application's), collectives blocking (--device 1) or stream-ordered
 * on a stream of the tool (--device 2: braid_<coll>_stream, completed by cudaStreamSynchronize
 * and the communicator's async error). Built with CUDA only; without, dev_setup fails. */
#include "device.h"

#include <stdio.h>

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

static cudaStream_t stream;
static int mode;

int perf_dev_select(int local_rank)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "--device: no CUDA device\n");
        return -1;
    }
    /* Ranks of one host share the devices round-robin (several ranks per GPU are allowed). */
    if (cudaSetDevice(local_rank % n) != cudaSuccess) return -1;
    return 0;
}

int perf_dev_setup(perf_backend_t *b, int m)
{
    (void)b;
    mode = m;
    if (m == 2 && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "--device 2: cannot create a stream\n");
        return -1;
    }
    return 0;
}

void *perf_dev_alloc(perf_backend_t *b, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaMalloc(%zu): %s\n", b->rank, bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

void perf_dev_free(perf_backend_t *b, void *p)
{
    (void)b;
    cudaFree(p);
}

int perf_dev_copy(perf_backend_t *b, void *dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    if (e != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaMemcpy: %s\n", b->rank, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

void *perf_dev_stream(void)
{
    return mode == 2 ? (void *)stream : NULL;
}

int perf_dev_sync(void)
{
    return mode == 2 && cudaStreamSynchronize(stream) != cudaSuccess ? -1 : 0;
}
#else
int perf_dev_select(int local_rank)
{
    (void)local_rank;
    fprintf(stderr, "--device: the perf tools were built without CUDA\n");
    return -1;
}
int perf_dev_setup(perf_backend_t *b, int m)
{
    (void)b;
    (void)m;
    return -1;
}
void *perf_dev_alloc(perf_backend_t *b, size_t bytes)
{
    (void)b;
    (void)bytes;
    return NULL;
}
void perf_dev_free(perf_backend_t *b, void *p)
{
    (void)b;
    (void)p;
}
int perf_dev_copy(perf_backend_t *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    (void)dst;
    (void)src;
    (void)bytes;
    return -1;
}
void *perf_dev_stream(void)
{
    return NULL;
}
int perf_dev_sync(void)
{
    return 0;
}
#endif
