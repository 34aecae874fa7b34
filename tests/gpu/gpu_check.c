/* The GPU half of braid's tests, run by tests/gpu/run.sh on a machine with a CUDA device (it
 * is only compiled elsewhere). Subcommands, each printing "RESULT <name> PASS|FAIL <detail>"
 * lines that run.sh collects into its table:
 *   probe           a CUDA device is visible (exit 1 if not)
 *   reduce          every dtype x kernel (sum prod min max avg div, and pre: the floating
 *                   dtypes' avg pre-scaling) on random bit patterns (NaN,
 *                   inf, subnormals included), aligned and shifted by one element: the CUDA
 *                   kernels against the CPU kernels, bit for bit
 *   bw [MiB]        reduction kernel bandwidth (bytes read + written) vs cudaMemcpy D2D
 *   coll N          N ranks as processes on one GPU (device 0): every collective x dtype x op
 *                   on device buffers, blocking and stream-ordered, in place and not
 *   threads N       N communicators in one process (a thread each) on one GPU, blocking and
 *                   stream-ordered (gpu_engine.c)
 *   ringbw N [MiB]  all-reduce bus bandwidth of N communicators of one process (concurrent
 *                   kernels) against the memory-traffic model of the ring (gpu_engine.c)
 *   kill N          N ranks, one killed mid-collective: the others get an error, not a hang
 *   p2p N           N ranks as processes: sendrecv (a ring in a group) and alltoall on device
 *                   buffers, checked
 * After each coll/threads sweep every rank reports whether the device engine ran its calls
 * ("RESULT engine/..."): with BRAID_DEV_ENGINE=device (run.sh sets it) a call the engine
 * could not take is an error, so a silent fallback to staging cannot pass.
 *   nodev           BRAID_CUDA=0: the stream forms are refused (BRAID_ERR_UNSUPPORTED) */
#include "braid/braid.h"
#include "cuda/reduce_dev.h"
#include "gpu_check.h"
#include "data.h"
#include "mp.h"
#include "reduce/reduce.h"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- hang diagnosis: SIGUSR2 (tests/gpu/bounded.sh sends it to a step that ran out of time)
 * makes every thread of the process write its backtrace to stderr, one thread at a time. The
 * frames are offsets into the binary or library, resolved with addr2line against the build. */
static atomic_flag bt_lock = ATOMIC_FLAG_INIT;

static void bt_thread(int sig)
{
    (void)sig;
    void *f[48];
    int n = backtrace(f, 48);
    while (atomic_flag_test_and_set(&bt_lock))
        ;
    char hdr[64];
    int len = snprintf(hdr, sizeof(hdr), "== backtrace pid %d tid %ld\n", (int)getpid(),
                       (long)syscall(SYS_gettid));
    if (write(2, hdr, (size_t)len) < 0) len = 0;
    backtrace_symbols_fd(f, n, 2);
    atomic_flag_clear(&bt_lock);
}

static void bt_all(int sig)
{
    (void)sig;
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') syscall(SYS_tgkill, getpid(), atoi(e->d_name), SIGUSR1);
    closedir(d);
}

static void bt_install(void)
{
    void *f[2];
    (void)backtrace(f, 2); /* loads the unwinder now, not in a handler */
    signal(SIGUSR1, bt_thread);
    signal(SIGUSR2, bt_all);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmd_reduce(void)
{
    const size_t n = (1u << 20) + 13;
    int fails = 0;
    for (int dt = 0; dt < BRAID_NUM_DTYPES && dt < 10; dt++) {
        size_t es = braid_dtype_size((braid_datatype_t)dt), bytes = (n + 1) * es;
        uint8_t *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) {
            a[i] = (uint8_t)next_rand();
            b[i] = (uint8_t)next_rand();
        }
        void *da, *db, *dd;
        CK(cudaMalloc(&da, bytes));
        CK(cudaMalloc(&db, bytes));
        CK(cudaMalloc(&dd, bytes));
        CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
        for (int k = 0; k < BRAID_CUDA_K_COUNT; k++)
            for (int shift = 0; shift < 2; shift++) {
                size_t off = (size_t)shift * es, cnt = n - (size_t)shift;
                int nr = 3 + k;
                if (k == BRAID_CUDA_K_PRE && dt < BRAID_FLOAT16)
                    continue; /* the floating dtypes' kernel only */
                if (k < 4)
                    braid_reduce_pair((braid_datatype_t)dt, (braid_redop_t)k, want + off, a + off,
                                      b + off, cnt);
                else if (k == 4)
                    braid_reduce_pair_final((braid_datatype_t)dt, BRAID_AVG, want + off, a + off,
                                            b + off, cnt, nr);
                else if (k == 5)
                    braid_reduce_finalize((braid_datatype_t)dt, BRAID_AVG, want + off, a + off, cnt,
                                          nr);
                else
                    braid_reduce_avg_prescale((braid_datatype_t)dt, want + off, a + off, cnt, nr);
                int rc = braid_cuda_reduce_launch(dt, k, (char *)dd + off, (char *)da + off,
                                                  (char *)db + off, cnt, nr, NULL);
                CK((cudaError_t)rc);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(got, dd, bytes, cudaMemcpyDeviceToHost));
                size_t bad = 0, first = 0;
                for (size_t i = 0; i < cnt * es; i++)
                    if (got[off + i] != want[off + i] && !bad++) first = i / es;
                static const char *kn[] = {"sum", "prod", "min", "max", "avg", "div", "pre"};
                printf("RESULT reduce/%s/%s%s %s %zu of %zu elements differ%s\n",
                       braid_dtype_name((braid_datatype_t)dt), kn[k], shift ? "/shifted" : "",
                       bad ? "FAIL" : "PASS", bad ? bad / es + 1 : 0, cnt, bad ? " (first" : "");
                if (bad) printf("  first mismatch at element %zu\n", first);
                fails += bad != 0;
            }
        cudaFree(da);
        cudaFree(db);
        cudaFree(dd);
        free(a);
        free(b);
        free(want);
        free(got);
    }
    return fails ? 1 : 0;
}

static int cmd_bw(size_t mib)
{
    size_t bytes = mib << 20;
    void *a, *b, *d;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemset(a, 0x3c, bytes));
    CK(cudaMemset(b, 0x3c, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 20;
    float ms;
    CK(cudaMemcpy(d, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0, NULL));
    for (int i = 0; i < reps; i++)
        CK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, NULL));
    CK(cudaEventRecord(e1, NULL));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double copy = 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
    printf("RESULT bw/copy/%zuMiB PASS %.1f GB/s (read + written)\n", mib, copy);
    int fails = 0;
    static const int dts[] = {BRAID_FLOAT32, BRAID_BFLOAT16, BRAID_FLOAT16, BRAID_FLOAT64,
                              BRAID_INT8};
    for (size_t t = 0; t < sizeof(dts) / sizeof(dts[0]); t++) {
        size_t cnt = bytes / braid_dtype_size((braid_datatype_t)dts[t]);
        CK((cudaError_t)braid_cuda_reduce_launch(dts[t], 0, d, a, b, cnt, 1, NULL));
        CK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < reps; i++)
            CK((cudaError_t)braid_cuda_reduce_launch(dts[t], 0, d, a, b, cnt, 1, NULL));
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        double bw = 3.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
        int ok = bw >= 0.9 * copy;
        fails += !ok;
        printf("RESULT bw/reduce-%s-sum/%zuMiB %s %.1f GB/s = %.2f of the copy (target 0.90)\n",
               braid_dtype_name((braid_datatype_t)dts[t]), mib, ok ? "PASS" : "FAIL", bw,
               bw / copy);
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    return fails ? 1 : 0;
}

/* ---- collectives on device buffers -------------------------------------------------------- */

/* Waits for stream s, at most 60 s: a stream that is never released is a failure reported
 * here, not a hang of the whole run. */
static int stream_done(cudaStream_t s, int rank)
{
    for (int i = 0; i < 600000; i++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return 1;
        if (e != cudaErrorNotReady) {
            fprintf(stderr, "rank %d: stream: %s\n", rank, cudaGetErrorString(e));
            return 0;
        }
        usleep(100);
    }
    fprintf(stderr, "rank %d: the stream was not released in 60 s\n", rank);
    return 0;
}

/* The device buffer every call of a rank uses (allocated once: cudaMalloc/cudaFree between
 * calls would synchronise with the device, and with several ranks' threads in one process,
 * wait for another rank's held stream whose release needs this rank's next call). */
#define ONE_COLL_BYTES ((size_t)8 << 20)

static int one_coll(braid_comm_t comm, int rank, int n, int coll, braid_datatype_t dt,
                    braid_redop_t op, size_t count, int in_place, int use_stream, cudaStream_t s,
                    char *d)
{
    size_t es = braid_dtype_size(dt), nn = (size_t)n;
    size_t in_e = coll == 4 ? count * nn : count, out_e = coll == 5 ? count * nn : count;
    size_t tot = (in_e + out_e) * es + 64;
    if (tot > ONE_COLL_BYTES) {
        fprintf(stderr, "rank %d: %zu bytes do not fit the buffer\n", rank, tot);
        return 1;
    }
    char *h = calloc(1, tot), *hout = malloc(out_e * es + 64);
    /* prime counts start one element past a 16-byte boundary (unaligned to the vector width) */
    size_t off = count == 97 ? es : 0;
    char *din = d + off, *dout = d + off + in_e * es;
    int root = n - 1;
    /* host image of the input */
    if (coll == 5)
        data_fill(h, dt, op, rank, 0, count, 7);
    else if (coll != 2 || rank == root)
        data_fill(h, dt, op, rank, 0, in_e, 7);
    const void *sb = din;
    void *rb = dout;
    if (in_place) {
        if (coll == 4)
            rb = din + (size_t)rank * count * es;
        else if (coll == 5)
            sb = dout + (size_t)rank * count * es, din = (char *)sb;
        else
            rb = din;
    }
    /* the output poisoned (0xa5) where it is not the input: a result never written fails */
    memset(hout, 0xa5, out_e * es + 64);
    /* The stream form writes its inputs on the call's stream (s is a non-blocking stream: the
     * collective on it is not ordered after the legacy default stream, where a cudaMemcpy from
     * pageable memory returns before its DMA lands); the blocking form reads after the legacy
     * stream's work (braid waits for it), as a caller of cudaMemcpy expects. */
    size_t in_bytes = (coll == 5 ? count : in_e) * es;
    if (use_stream) {
        if (!in_place) CK(cudaMemcpyAsync(dout, hout, out_e * es, cudaMemcpyHostToDevice, s));
        CK(cudaMemcpyAsync(din, h, in_bytes, cudaMemcpyHostToDevice, s));
    } else {
        if (!in_place) CK(cudaMemcpy(dout, hout, out_e * es, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(din, h, in_bytes, cudaMemcpyHostToDevice));
    }
    braid_result_t r = BRAID_SUCCESS;
    void *st = use_stream ? (void *)s : NULL;
    switch (coll) {
    case 1:
        r = st ? braid_allreduce_stream(sb, rb, count, dt, op, comm, st)
               : braid_allreduce(sb, rb, count, dt, op, comm);
        break;
    case 2:
        r = st ? braid_broadcast_stream(sb, rb, count, dt, root, comm, st)
               : braid_broadcast(sb, rb, count, dt, root, comm);
        break;
    case 3:
        r = st ? braid_reduce_stream(sb, rb, count, dt, op, root, comm, st)
               : braid_reduce(sb, rb, count, dt, op, root, comm);
        break;
    case 4:
        r = st ? braid_reduce_scatter_stream(sb, rb, count, dt, op, comm, st)
               : braid_reduce_scatter(sb, rb, count, dt, op, comm);
        break;
    case 5:
        r = st ? braid_allgather_stream(sb, rb, count, dt, comm, st)
               : braid_allgather(sb, rb, count, dt, comm);
        break;
    }
    if (r != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: coll %d: %s\n", rank, coll, braid_last_error());
        return 1;
    }
    if (st && !stream_done(s, rank)) return 1;
    braid_result_t aerr = BRAID_SUCCESS;
    const char *amsg = NULL;
    braid_comm_get_error(comm, &aerr, &amsg);
    if (aerr != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: async error: %s\n", rank, amsg);
        return 1;
    }
    CK(cudaMemcpy(hout, rb, out_e * es, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    char what[128];
    snprintf(what, sizeof(what), "rank %d coll %d %s %s n=%zu%s%s", rank, coll,
             braid_dtype_name(dt), braid_op_name(op), count, in_place ? " in place" : "",
             st ? " stream" : "");
    if (count) {
        if (coll == 1)
            bad = data_check_reduced(hout, dt, op, n, 0, count, 7, what);
        else if (coll == 2)
            bad = data_check_rank(hout, dt, op, root, 0, count, 7, what);
        else if (coll == 3 && rank == root)
            bad = data_check_reduced(hout, dt, op, n, 0, count, 7, what);
        else if (coll == 4)
            bad = data_check_reduced(hout, dt, op, n, (size_t)rank * count, count, 7, what);
        else if (coll == 5)
            for (int j = 0; j < n; j++)
                bad += data_check_rank(hout + (size_t)j * count * es, dt, op, j, 0, count, 7, what);
    }
    free(h);
    free(hout);
    return bad ? 1 : 0;
}

/* Sends and receives (a ring in a group, i-forms) and alltoall on device buffers: staged
 * through host memory (src/core/p2p_dev.c); results checked element by element. */
static int p2p_rank(braid_comm_t comm, int rank, int n, void *argp)
{
    (void)argp;
    const size_t cnt = 100003; /* prime, 400 KB of int32 */
    size_t bytes = cnt * 4;
    int32_t *h = malloc(bytes * (size_t)n), *d = NULL;
    CK(cudaMalloc((void **)&d, bytes * (size_t)(2 * n + 2)));
    int to = (rank + 1) % n, from = (rank + n - 1) % n, bad = 0;
    for (size_t i = 0; i < cnt * (size_t)n; i++)
        h[i] = (int32_t)(rank * 1000003 + (int)i);
    CK(cudaMemcpy(d, h, bytes * (size_t)n, cudaMemcpyHostToDevice));
    CK(cudaMemset(d + cnt * (size_t)n, 0xa5, bytes * (size_t)n));
    braid_result_t r = braid_group_start();
    if (r == BRAID_SUCCESS) r = braid_send(d, cnt, BRAID_INT32, to, comm);
    if (r == BRAID_SUCCESS) r = braid_recv(d + cnt * (size_t)n, cnt, BRAID_INT32, from, comm);
    braid_result_t e = braid_group_end();
    if (r != BRAID_SUCCESS || e != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: sendrecv: %s\n", rank, braid_last_error());
        return 1;
    }
    CK(cudaMemcpy(h, d + cnt * (size_t)n, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < cnt && bad < 3; i++)
        if (h[i] != (int32_t)(from * 1000003 + (int)i))
            fprintf(stderr, "rank %d: sendrecv element %zu: %d\n", rank, i, h[i]), bad++;
    for (size_t i = 0; i < cnt * (size_t)n; i++)
        h[i] = (int32_t)(rank * 1000003 + (int)i);
    if (braid_alltoall(d, d + cnt * (size_t)n, cnt, BRAID_INT32, comm) != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: alltoall: %s\n", rank, braid_last_error());
        return 1;
    }
    CK(cudaMemcpy(h, d + cnt * (size_t)n, bytes * (size_t)n, cudaMemcpyDeviceToHost));
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < cnt && bad < 6; i++)
            if (h[(size_t)p * cnt + i] != (int32_t)(p * 1000003 + (int)((size_t)rank * cnt + i)))
                fprintf(stderr, "rank %d: alltoall from %d element %zu\n", rank, p, i), bad++;
    /* i-forms on device buffers, then a stream-ordered call on the legacy stream before the
     * wait: the worker runs the queued send while the legacy stream is held, so nothing of it
     * may wait for the legacy stream there (a session-26 review found it did) */
    braid_request_t rq[2];
    float *f = (float *)(void *)(d + cnt * (size_t)n);
    CK(cudaMemset(f, 0, 64 * sizeof(float)));
    r = braid_irecv(d + cnt * (size_t)(n + 1), cnt, BRAID_INT32, from, comm, &rq[0]);
    if (r == BRAID_SUCCESS) r = braid_isend(d, cnt, BRAID_INT32, to, comm, &rq[1]);
    if (r == BRAID_SUCCESS) r = braid_allreduce_stream(f, f, 64, BRAID_FLOAT32, BRAID_SUM, comm, 0);
    for (int i = 0; i < 2 && r == BRAID_SUCCESS; i++)
        r = braid_wait(rq[i]);
    if (r == BRAID_SUCCESS && cudaStreamSynchronize(0) != cudaSuccess) r = BRAID_ERR_SYSTEM;
    if (r != BRAID_SUCCESS) {
        fprintf(stderr, "rank %d: isend/irecv around a stream call: %s\n", rank,
                braid_last_error());
        bad++;
    }
    cudaFree(d);
    free(h);
    return bad ? 1 : 0;
}

int coll_rank(braid_comm_t comm, int rank, int n, void *argp)
{
    coll_arg_t *ca = argp;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char *d;
    CK(cudaMalloc((void **)&d, ONE_COLL_BYTES));
    static const size_t counts[] = {0, 1, 97, 1 << 16};
    int fails = 0;
    /* GPU_CHECK_QUICK=1: float32, float16, bfloat16, int8, uint64 only (every op still) */
    const char *q = getenv("GPU_CHECK_QUICK");
    int quick = q && *q == '1';
    for (int coll = 1; coll <= 5; coll++)
        for (int dt = 0; dt < 10; dt++)
            for (int op = 0; op < (coll == 2 || coll == 5 ? 1 : BRAID_NUM_OPS); op++)
                for (size_t ci = 0; ci < 4; ci++) {
                    if (quick && dt != BRAID_FLOAT32 && dt != BRAID_FLOAT16 &&
                        dt != BRAID_BFLOAT16 && dt != BRAID_INT8 && dt != BRAID_UINT64)
                        continue;
                    int ip = (int)((ci + (size_t)op) & 1);
                    fails += one_coll(comm, rank, n, coll, (braid_datatype_t)dt, (braid_redop_t)op,
                                      counts[ci], ip, ca->stream_mode, s, d);
                    if (ca->kill_rank == rank && coll == 1 && ci == 2) {
                        /* dies with a collective in flight on its peers */
                        kill(getpid(), SIGKILL);
                    }
                    if (ca->kill_rank >= 0 && fails) return 0; /* the expected error came */
                }
    if (ca->kill_rank >= 0) {
        fprintf(stderr, "rank %d: no error although rank %d died\n", rank, ca->kill_rank);
        return 1;
    }
    cudaStreamDestroy(s);
    cudaFree(d);
    fails += engine_report(comm, rank, n, ca->stream_mode ? "stream" : "blocking");
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    setlinebuf(stdout);
    bt_install();
    const char *cmd = argc > 1 ? argv[1] : "";
    int n = argc > 2 ? atoi(argv[2]) : 2;
    if (!strcmp(cmd, "probe")) {
        int nd = 0;
        cudaError_t e = cudaGetDeviceCount(&nd);
        struct cudaDeviceProp pr;
        if (e == cudaSuccess && nd > 0) e = cudaGetDeviceProperties(&pr, 0);
        if (e != cudaSuccess || nd < 1) {
            printf("RESULT probe FAIL no CUDA device (%s)\n",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
            return 1;
        }
        printf("RESULT probe PASS %d device(s); device 0: %s, %.0f GiB, %d SMs, cc %d.%d\n", nd,
               pr.name, (double)pr.totalGlobalMem / (1 << 30), pr.multiProcessorCount, pr.major,
               pr.minor);
        return 0;
    }
    if (!strcmp(cmd, "reduce")) return cmd_reduce();
    if (!strcmp(cmd, "bw")) return cmd_bw(argc > 2 ? (size_t)atol(argv[2]) : 256);
    if (!strcmp(cmd, "coll") || !strcmp(cmd, "kill")) {
        int killing = !strcmp(cmd, "kill");
        int rc = 0;
        for (int mode = 0; mode < (killing ? 1 : 2); mode++) {
            coll_arg_t ca = {.stream_mode = mode, .kill_rank = killing ? n / 2 : -1};
            /* the ranks are forked before this process touches CUDA */
            int bad = mp_run(n, coll_rank, &ca, killing ? 120 : 400);
            int ok = killing ? bad == 1 : bad == 0;
            printf("RESULT %s/n=%d/%s %s %d rank(s) failed%s\n", cmd, n,
                   mode ? "stream" : "blocking", ok ? "PASS" : "FAIL", bad,
                   killing ? " (expected: the killed one)" : "");
            rc |= !ok;
        }
        return rc;
    }
    if (!strcmp(cmd, "p2p")) {
        int bad = mp_run(n, p2p_rank, NULL, 120);
        printf("RESULT p2p/n=%d %s %d rank(s) failed (sendrecv and alltoall, device buffers)\n", n,
               bad ? "FAIL" : "PASS", bad);
        return bad ? 1 : 0;
    }
    if (!strcmp(cmd, "threads")) return cmd_threads(n);
    if (!strcmp(cmd, "robust")) return cmd_robust(argc > 2 ? argv[2] : "");
    if (!strcmp(cmd, "ringbw")) return cmd_ringbw(n, argc > 3 ? (size_t)atol(argv[3]) : 256);
    if (!strcmp(cmd, "nodev")) {
        setenv("BRAID_CUDA", "0", 1);
        void *d;
        CK(cudaMalloc(&d, 64));
        braid_unique_id_t id;
        braid_comm_t c;
        braid_get_unique_id(&id);
        if (braid_comm_init_rank(&c, 1, id, 0) != BRAID_SUCCESS) return 2;
        /* BRAID_CUDA=0 never asks CUDA: a device pointer would be taken as host memory (and the
         * CPU fault on it), so only the stream form is called here. */
        braid_result_t s = braid_allreduce_stream(d, d, 4, BRAID_FLOAT32, BRAID_SUM, c, NULL);
        int ok = s == BRAID_ERR_UNSUPPORTED;
        printf("RESULT nodev %s stream form -> %d (%s)\n", ok ? "PASS" : "FAIL", s,
               braid_last_error());
        braid_comm_destroy(c);
        return !ok;
    }
    fprintf(stderr,
            "usage: %s reduce | bw [MiB] | coll N | threads N | ringbw N [MiB] | kill N | p2p N | "
            "nodev | robust WHAT\n",
            argv[0]);
    return 2;
}
