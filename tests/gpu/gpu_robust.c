/* GPU checks of the device path's failure handling (braid_gpu_check robust WHAT), one RESULT
 * line each; what they show cannot be shown without a GPU (the CPU twin has no streams):
 *   lasterr   a stale non-sticky error on the calling thread (a failed cudaMalloc) does not make
 *             the next launch look failed (engine.cu, reduce.cu clear it first)
 *   capture   a stream-ordered call on a stream being captured into a graph is refused
 *             (BRAID_ERR_UNSUPPORTED) and the capture is left valid
 *   legacy    the legacy default stream held (cuStreamWaitValue32) while two communicators set
 *             up their device engine and run: the region's zeroing is not queued behind it (it
 *             was: cudaMemset, which then wiped the FIFOs once the stream was released)
 *   device    the calling thread's current device is restored (two devices, else SKIP)
 *   hang      (BRAID_TIMEOUT=1 BRAID_DEV_SPINS=1073741824) rank 0 runs an all-reduce its peer
 *             never joins: the launch times out, the kernel is stopped through its abort word,
 *             the call and braid_comm_destroy return (they hung: an unbounded synchronize)
 *   nbstage   (BRAID_DEV_ENGINE=stage) braid_iallreduce of 64 MiB then a 1 MiB stream-ordered
 *             all-reduce: both complete (the staging area grows on the caller's thread) */
#include "braid/braid.h"
#include "gpu_check.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A float32 device buffer of n elements, rank * 1000 + i % 997; NULL when it cannot be made. */
static float *dev_fill(size_t n, int rank)
{
    float *h = malloc(n * sizeof(float)), *d = NULL;
    if (!h || cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) {
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rank * 1000 + (int)(i % 997));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}

/* Elements of the sum over n ranks of dev_fill that are wrong (every element when unreadable). */
static size_t dev_bad(const float *d, size_t count, int nranks)
{
    float *h = malloc(count * sizeof(float));
    if (!h || cudaMemcpy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return count;
    }
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < nranks; r++)
            want += (float)(r * 1000 + (int)(i % 997));
        bad += h[i] != want;
    }
    free(h);
    return bad;
}

typedef struct {
    braid_unique_id_t id;
    int rank, n, what, rc;
    volatile int *gate; /* legacy: the held stream's release; hang: rank 0 has returned */
    double t_first;     /* legacy: when the first all-reduce returned */
    char msg[300];
} rob_t;

enum { W_LASTERR, W_LEGACY, W_HANG };

static void *rob_rank(void *p)
{
    rob_t *t = p;
    braid_comm_t c = NULL;
    cudaSetDevice(0);
    if (braid_comm_init_rank(&c, t->n, t->id, t->rank) != BRAID_SUCCESS) {
        snprintf(t->msg, sizeof(t->msg), "init: %s", braid_last_error());
        t->rc = 1;
        return NULL;
    }
    const size_t count = 1 << 16;
    float *buf = dev_fill(count, t->rank);
    if (!buf) {
        snprintf(t->msg, sizeof(t->msg), "cannot allocate device memory");
        t->rc = 1;
        braid_comm_destroy(c);
        return NULL;
    }
    int rounds = t->what == W_LEGACY ? 3 : 1;
    for (int k = 0; k < rounds && !t->rc; k++) {
        if (t->what == W_LASTERR) { /* a non-sticky error left pending on this thread */
            void *huge = NULL;
            if (cudaMalloc(&huge, (size_t)1 << 50) == cudaSuccess) cudaFree(huge);
        }
        if (t->what == W_LEGACY && k == 1)
            while (!*t->gate) /* the later rounds after the legacy stream ran its work */
                sched_yield();
        braid_result_t r = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, c);
        if (k == 0) t->t_first = now_s();
        if (r != BRAID_SUCCESS) {
            snprintf(t->msg, sizeof(t->msg), "all-reduce %d: %s", k, braid_last_error());
            t->rc = 1;
        } else if (k == 0 && dev_bad(buf, count, t->n)) {
            snprintf(t->msg, sizeof(t->msg), "all-reduce %d: wrong result", k);
            t->rc = 1;
        }
    }
    if (t->what == W_HANG && !t->rc) {
        if (t->rank == 0) {
            double t0 = now_s();
            braid_result_t r = braid_allreduce(buf, buf, count, BRAID_FLOAT32, BRAID_SUM, c);
            snprintf(t->msg, sizeof(t->msg), "lone all-reduce -> %d after %.1f s (%s)", r,
                     now_s() - t0, braid_last_error());
            t->rc = r == BRAID_SUCCESS;
            *t->gate = 1;
        } else {
            while (!*t->gate)
                sched_yield();
        }
    }
    double t0 = now_s();
    braid_comm_destroy(c);
    if (now_s() - t0 > 30) t->rc = 1;
    cudaFree(buf);
    return NULL;
}

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static int two_ranks(int what, const char *name, volatile int *gate, volatile uint32_t *hold)
{
    rob_t t[2];
    pthread_t th[2];
    braid_unique_id_t id;
    if (braid_get_unique_id(&id) != BRAID_SUCCESS) return 2;
    double t0 = now_s();
    for (int i = 0; i < 2; i++) {
        t[i] = (rob_t){.id = id, .rank = i, .n = 2, .what = what, .gate = gate};
        if (pthread_create(&th[i], NULL, rob_rank, &t[i]) != 0) return 2;
    }
    double released = 0;
    if (what == W_LEGACY) { /* hold the legacy stream until both first rounds returned, or 10 s */
        while ((!t[0].t_first || !t[1].t_first) && now_s() - t0 < 10 && !t[0].rc && !t[1].rc)
            sched_yield();
        released = now_s();
        __atomic_store_n(hold, 1, __ATOMIC_RELEASE);
        cudaStreamSynchronize(0);
        *gate = 1;
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    int ok = !t[0].rc && !t[1].rc;
    if (what == W_LEGACY && ok && (t[0].t_first > released || t[1].t_first > released))
        ok = 0, snprintf(t[0].msg, sizeof(t[0].msg), "the setup waited for the held stream");
    printf("RESULT robust/%s %s %s%s%s (%.1f s)\n", name, ok ? "PASS" : "FAIL", t[0].msg,
           t[0].msg[0] && t[1].msg[0] ? "; " : "", t[1].msg, now_s() - t0);
    return !ok;
}

static int check_legacy(void)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    uint32_t *hold = NULL;
    void *hold_d = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        !fn || cudaHostAlloc((void **)&hold, 64, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer(&hold_d, hold, 0) != cudaSuccess) {
        printf("RESULT robust/legacy FAIL cannot hold the legacy stream\n");
        return 1;
    }
    *hold = 0;
    if (((wait32_fn)fn)(CU_STREAM_LEGACY, (CUdeviceptr)(uintptr_t)hold_d, 1,
                        CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
        printf("RESULT robust/legacy FAIL cuStreamWaitValue32 on the legacy stream\n");
        return 1;
    }
    volatile int gate = 0;
    int rc = two_ranks(W_LEGACY, "legacy", &gate, hold);
    cudaFreeHost(hold);
    return rc;
}

static braid_comm_t one_comm(void)
{
    braid_unique_id_t id;
    braid_comm_t c = NULL;
    if (braid_get_unique_id(&id) != BRAID_SUCCESS ||
        braid_comm_init_rank(&c, 1, id, 0) != BRAID_SUCCESS)
        return NULL;
    return c;
}

static int check_capture(void)
{
    cudaSetDevice(0);
    braid_comm_t c = one_comm();
    float *d = dev_fill(1024, 0);
    cudaStream_t s;
    if (!c || !d || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 2;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    braid_result_t r = braid_allreduce_stream(d, d, 1024, BRAID_FLOAT32, BRAID_SUM, c, s);
    char msg[300];
    snprintf(msg, sizeof(msg), "%s", braid_last_error());
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    int ok = r == BRAID_ERR_UNSUPPORTED && strstr(msg, "captured") && ce == cudaSuccess;
    printf("RESULT robust/capture %s -> %d (%s); capture ended: %s\n", ok ? "PASS" : "FAIL", r, msg,
           cudaGetErrorString(ce));
    if (g) cudaGraphDestroy(g);
    /* and outside a capture the call runs */
    r = braid_allreduce_stream(d, d, 1024, BRAID_FLOAT32, BRAID_SUM, c, s);
    ok &= r == BRAID_SUCCESS && cudaStreamSynchronize(s) == cudaSuccess;
    braid_comm_destroy(c);
    cudaFree(d);
    cudaStreamDestroy(s);
    return !ok;
}

static int check_device(void)
{
    int nd = 0;
    if (cudaGetDeviceCount(&nd) != cudaSuccess || nd < 2) {
        printf("RESULT robust/device SKIP needs two devices (%d here)\n", nd);
        return 0;
    }
    cudaSetDevice(0);
    braid_comm_t c = one_comm();
    float *d = dev_fill(4096, 0);
    cudaStream_t s0;
    if (!c || !d || cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking) != cudaSuccess) return 2;
    cudaSetDevice(1); /* the thread works on device 1 and calls a communicator of device 0 */
    braid_result_t r = braid_allreduce(d, d, 4096, BRAID_FLOAT32, BRAID_SUM, c);
    int cur = -1, cur2 = -1;
    cudaGetDevice(&cur);
    braid_result_t r2 = braid_allreduce_stream(d, d, 4096, BRAID_FLOAT32, BRAID_SUM, c, s0);
    cudaGetDevice(&cur2);
    cudaSetDevice(0);
    int ok = r == BRAID_SUCCESS && r2 == BRAID_SUCCESS && cudaStreamSynchronize(s0) == 0 &&
             cur == 1 && cur2 == 1;
    printf("RESULT robust/device %s allreduce -> %d, stream form -> %d, current device after "
           "them %d, %d (want 1) %s\n",
           ok ? "PASS" : "FAIL", r, r2, cur, cur2, ok ? "" : braid_last_error());
    braid_comm_destroy(c);
    cudaFree(d);
    cudaStreamDestroy(s0);
    return !ok;
}

static int check_nbstage(void)
{
    cudaSetDevice(0);
    braid_comm_t c = one_comm();
    size_t big = (size_t)16 << 20, small = (size_t)256 << 10; /* floats: 64 MiB, 1 MiB */
    float *a = dev_fill(big, 0), *b = dev_fill(small, 0);
    cudaStream_t s;
    if (!c || !a || !b || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return 2;
    double t0 = now_s();
    braid_request_t req = NULL;
    braid_result_t r1 = braid_iallreduce(a, a, big, BRAID_FLOAT32, BRAID_SUM, c, &req);
    braid_result_t r2 = braid_allreduce_stream(b, b, small, BRAID_FLOAT32, BRAID_SUM, c, s);
    braid_result_t r3 = r1 == BRAID_SUCCESS ? braid_wait(req) : r1;
    cudaError_t ce = cudaErrorNotReady;
    while (now_s() - t0 < 30 && (ce = cudaStreamQuery(s)) == cudaErrorNotReady)
        sched_yield();
    int ok = r2 == BRAID_SUCCESS && r3 == BRAID_SUCCESS && ce == cudaSuccess &&
             !dev_bad(a, big, 1) && !dev_bad(b, small, 1);
    printf("RESULT robust/nbstage %s iallreduce %d, stream %d, stream done: %s (%.1f s) %s\n",
           ok ? "PASS" : "FAIL", r3, r2, cudaGetErrorString(ce), now_s() - t0,
           ok ? "" : braid_last_error());
    braid_comm_destroy(c);
    cudaFree(a);
    cudaFree(b);
    return !ok;
}

int cmd_robust(const char *what)
{
    volatile int gate = 0;
    if (!strcmp(what, "lasterr")) return two_ranks(W_LASTERR, "lasterr", &gate, NULL);
    if (!strcmp(what, "legacy")) return check_legacy();
    if (!strcmp(what, "hang")) return two_ranks(W_HANG, "hang", &gate, NULL);
    if (!strcmp(what, "capture")) return check_capture();
    if (!strcmp(what, "device")) return check_device();
    if (!strcmp(what, "nbstage")) return check_nbstage();
    fprintf(stderr, "robust: lasterr | legacy | hang | capture | device | nbstage\n");
    return 2;
}
