/* GPU checks of the device engine (run by tests/gpu/run.sh through braid_gpu_check):
 *   threads N       N communicators in one process, a thread each, on device 0: the coll sweep,
 *                   blocking then stream-ordered
 *   ringbw N [MiB]  all-reduce (float32 sum, in place) of N communicators of one process on one
 *                   GPU, their kernels concurrent: bus bandwidth against the ring's memory
 *                   traffic model (below) at the measured device-to-device copy bandwidth
 * and engine_report, which says whether a communicator's calls ran on the device engine. */
#include "core/comm.h"
#include "cuda/cuda.h"
#include "gpu_check.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

int engine_report(braid_comm_t comm, int rank, int n, const char *mode)
{
    uint64_t calls, launches, idles;
    const char *why;
    braid_cuda_engine_stats(comm, &calls, &launches, &idles, &why);
    const char *want = getenv("BRAID_DEV_ENGINE");
    int must = !want || strcasecmp(want, "stage") != 0;
    int ok = !must || calls > 0;
    printf("RESULT engine/n=%d/%s/rank%d %s %llu calls on the device engine, %llu launches (%llu "
           "without progress)%s%s\n",
           n, mode, rank, ok ? "PASS" : "FAIL", (unsigned long long)calls,
           (unsigned long long)launches, (unsigned long long)idles, why ? ": not used: " : "",
           why ? why : "");
    return !ok;
}

typedef struct {
    braid_unique_id_t id;
    int rank, n, rc, mode;
    size_t bytes;
    double secs;
    pthread_barrier_t *bar;
} thr_t;

static void *thread_rank(void *p)
{
    thr_t *t = p;
    braid_comm_t c;
    CK(cudaSetDevice(0));
    if (braid_comm_init_rank(&c, t->n, t->id, t->rank) != BRAID_SUCCESS) {
        fprintf(stderr, "thread %d: init: %s\n", t->rank, braid_last_error());
        t->rc = 1;
        return NULL;
    }
    coll_arg_t ca = {.stream_mode = t->mode, .kill_rank = -1};
    t->rc = coll_rank(c, t->rank, t->n, &ca);
    braid_comm_destroy(c);
    return NULL;
}

int cmd_threads(int n)
{
    if (n < 1 || n > 8) return 2;
    int rc = 0;
    for (int mode = 0; mode < 2; mode++) {
        thr_t t[8];
        pthread_t th[8];
        braid_unique_id_t id;
        if (braid_get_unique_id(&id) != BRAID_SUCCESS) return 2;
        for (int i = 0; i < n; i++) {
            t[i] = (thr_t){.id = id, .rank = i, .n = n, .mode = mode};
            if (pthread_create(&th[i], NULL, thread_rank, &t[i]) != 0) return 2;
        }
        int bad = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            bad += t[i].rc != 0;
        }
        printf("RESULT threads/n=%d/%s %s %d thread rank(s) failed\n", n,
               mode ? "stream" : "blocking", bad ? "FAIL" : "PASS", bad);
        rc |= bad != 0;
    }
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *bw_rank(void *p)
{
    thr_t *t = p;
    braid_comm_t c;
    CK(cudaSetDevice(0));
    if (braid_comm_init_rank(&c, t->n, t->id, t->rank) != BRAID_SUCCESS) {
        fprintf(stderr, "thread %d: init: %s\n", t->rank, braid_last_error());
        t->rc = 1;
        pthread_barrier_wait(t->bar);
        pthread_barrier_wait(t->bar);
        return NULL;
    }
    float *d;
    size_t count = t->bytes / sizeof(float);
    CK(cudaMalloc((void **)&d, t->bytes));
    CK(cudaMemset(d, 0, t->bytes));
    const int warm = 3, reps = 10;
    braid_result_t r = BRAID_SUCCESS;
    for (int i = 0; i < warm && r == BRAID_SUCCESS; i++)
        r = braid_allreduce(d, d, count, BRAID_FLOAT32, BRAID_SUM, c);
    pthread_barrier_wait(t->bar);
    double t0 = now_s();
    for (int i = 0; i < reps && r == BRAID_SUCCESS; i++)
        r = braid_allreduce(d, d, count, BRAID_FLOAT32, BRAID_SUM, c);
    t->secs = (now_s() - t0) / reps;
    pthread_barrier_wait(t->bar);
    if (r != BRAID_SUCCESS) {
        fprintf(stderr, "thread %d: %s\n", t->rank, braid_last_error());
        t->rc = 1;
    }
    char mode[32];
    snprintf(mode, sizeof(mode), "ringbw");
    t->rc |= engine_report(c, t->rank, t->n, mode);
    cudaFree(d);
    braid_comm_destroy(c);
    return NULL;
}

/* The model: ring all-reduce of S bytes on n ranks, as the engine's primitives move memory per
 * rank and loop block of S/n bytes: send 2 (read in, write the peer's slot), n-2 x
 * recvReduceSend 3 (read slot and in, write the peer's slot), recvReduceCopySend 4 (the result
 * written to the output and the peer's slot), n-2 x recvCopySend 3, recv 2: (6n - 4) S/n per
 * rank, (6n - 4) S over the GPU's memory. At the copy bandwidth B (bytes read + written per
 * second) the call takes at least (6n - 4) S / B, so busbw = 2 (n-1)/n S / t is at most
 * B 2 (n-1) / (n (6n - 4)). */
int cmd_ringbw(int n, size_t mib)
{
    if (n < 2 || n > 8) return 2;
    size_t bytes = mib << 20;
    void *a, *b;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    double t0 = now_s();
    for (int i = 0; i < 10; i++)
        CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());
    double copy = 2.0 * (double)bytes * 10 / (now_s() - t0);
    cudaFree(a);
    cudaFree(b);
    thr_t t[8];
    pthread_t th[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    braid_unique_id_t id;
    if (braid_get_unique_id(&id) != BRAID_SUCCESS) return 2;
    for (int i = 0; i < n; i++) {
        t[i] = (thr_t){.id = id, .rank = i, .n = n, .bytes = bytes, .bar = &bar};
        if (pthread_create(&th[i], NULL, bw_rank, &t[i]) != 0) return 2;
    }
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        bad += t[i].rc != 0;
        if (t[i].secs > worst) worst = t[i].secs;
    }
    pthread_barrier_destroy(&bar);
    if (bad || worst <= 0) {
        printf("RESULT ringbw/n=%d/%zuMiB FAIL %d thread rank(s) failed\n", n, mib, bad);
        return 1;
    }
    double busbw = (double)bytes / worst * 2.0 * (n - 1) / n;
    double bound = copy * 2.0 * (n - 1) / ((double)n * (6.0 * n - 4.0));
    printf("RESULT ringbw/n=%d/%zuMiB %s busbw %.1f GB/s, model bound %.1f GB/s at copy %.0f GB/s: "
           "%.2f of it (target 0.80)\n",
           n, mib, busbw >= 0.8 * bound ? "PASS" : "BELOW-TARGET", busbw / 1e9, bound / 1e9,
           copy / 1e9, busbw / bound);
    return 0;
}
