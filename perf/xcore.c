/* xcore: how fast a core can fetch data that another core has just written: the bound on a
 * shared-memory collective whose buffers fit in the caches, where every byte a rank needs from
 * a peer sits modified in the peer's cache and must cross between the cores.
 *
 *   xcore [-b BYTES] [-e BYTES] [-f FACTOR] [-t THREADS] [-r REPS] [--csv FILE]
 *
 * T threads (default 2), thread i pinned to the i-th cpu this process may run on (modulo their
 * count). Per size S and repetition, every thread writes S bytes into its own shared buffer
 * (the "copy in" of a collective: memcpy from a private source), all threads meet at a
 * spinning barrier, then every thread copies its right neighbour's buffer ((i + 1) % T) into a
 * private destination, and they meet again. The time from the first barrier to the second is
 * one fetch; a line per size gives the median over the repetitions of S / fetch time, per
 * thread, all threads fetching at once:
 *   xcore threads 2 bytes 1048576 GB/s 9.87
 * (GB = 1e9 bytes). An all-reduce of S bytes over n ranks must bring at least 2 (n-1)/n S bytes
 * into every rank from its peers (the peers' parts of its reduce-scatter slice, then the other
 * reduced slices), so its busbw (algbw * 2 (n-1)/n) is at most this rate while its data fits in
 * the caches; beyond the last-level cache perf/membw is the bound. Defaults: -b 32K -e 32M
 * -f 4, REPS such that every size moves at least 1 GiB per thread (20 at least). With more
 * threads than cpus the barrier yields and the figure includes context switches. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parse_bytes.h"

#define MAX_T 64

static int nthreads, ncpus, cpus[CPU_SETSIZE];
static size_t cur_bytes;
static int cur_reps;
static char *shared[MAX_T], *src[MAX_T], *dst[MAX_T];
static double *fetch_s, *write_s; /* [rep]: measured by thread 0 */
static _Atomic unsigned arrived, sense;
static _Atomic int quit;
static pthread_barrier_t phase; /* between sizes */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sense-reversing spin barrier; yields after a while (more threads than cpus). */
static void spin_barrier(unsigned *local)
{
    unsigned s = *local ^ 1u;
    *local = s;
    if (atomic_fetch_add(&arrived, 1) + 1 == (unsigned)nthreads) {
        atomic_store(&arrived, 0);
        atomic_store(&sense, s);
        return;
    }
    for (unsigned k = 0; atomic_load(&sense) != s; k++) {
        if (k > 2000) sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
}

/* Thread i's part of one size: a warm-up and cur_reps timed fetches (thread 0 times them). */
static void run_size(int i, unsigned *local)
{
    size_t s = cur_bytes;
    for (int r = -1; r < cur_reps; r++) {
        double tw = now_s();
        memcpy(shared[i], src[i], s);
        src[i][r & 63] ^= 1; /* the next round writes other bytes */
        spin_barrier(local);
        double t0 = now_s();
        memcpy(dst[i], shared[(i + 1) % nthreads], s);
        spin_barrier(local);
        if (i == 0 && r >= 0) {
            fetch_s[r] = now_s() - t0;
            write_s[r] = t0 - tw;
        }
    }
}

static void pin(int i)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[i % ncpus], &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set); /* best effort */
}

static void *worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    unsigned local = 0;
    pin(i);
    for (;;) {
        pthread_barrier_wait(&phase);
        if (atomic_load(&quit)) return NULL;
        run_size(i, &local);
        pthread_barrier_wait(&phase);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t minb = 32u << 10, maxb = 32u << 20;
    int factor = 4, reps_arg = 0;
    const char *csv = NULL;
    nthreads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-b") || !strcmp(a, "-e")) && i + 1 < argc) {
            size_t v = parse_bytes(argv[++i]);
            if (!v) {
                fprintf(stderr, "xcore: %s %s is not a size (bytes, or with K, M, G)\n", a,
                        argv[i]);
                return 2;
            }
            *(a[1] == 'b' ? &minb : &maxb) = v;
        } else if (!strcmp(a, "-f") && i + 1 < argc)
            factor = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && i + 1 < argc)
            nthreads = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && i + 1 < argc)
            reps_arg = atoi(argv[++i]);
        else if (!strcmp(a, "--csv") && i + 1 < argc)
            csv = argv[++i];
        else {
            fprintf(stderr, "usage: xcore [-b BYTES] [-e BYTES] [-f FACTOR] [-t THREADS] [-r REPS] "
                            "[--csv FILE]\n");
            return 2;
        }
    }
    if (nthreads < 2 || nthreads > MAX_T) {
        fprintf(stderr, "xcore: -t %d: 2 to %d threads\n", nthreads, MAX_T);
        return 2;
    }
    if (factor < 2 || minb > maxb) {
        fprintf(stderr, "xcore: need -f >= 2 and -b <= -e\n");
        return 2;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) cpus[ncpus++] = c;
    if (ncpus == 0) cpus[ncpus++] = 0;
    for (int i = 0; i < nthreads; i++) {
        shared[i] = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
        src[i] = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
        dst[i] = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
        if (!shared[i] || !src[i] || !dst[i]) {
            fprintf(stderr, "xcore: out of memory for %d x 3 x %zu bytes\n", nthreads, maxb);
            return 1;
        }
        memset(shared[i], 0, maxb); /* faults every page in */
        memset(src[i], i + 1, maxb);
        memset(dst[i], 0, maxb);
    }
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        fprintf(stderr, "xcore: cannot write %s\n", csv);
        return 1;
    }
    if (out) fprintf(out, "threads,bytes,reps,GBps,write_GBps\n");
    pthread_barrier_init(&phase, NULL, (unsigned)nthreads);
    pthread_t th[MAX_T];
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "xcore: pthread_create failed\n");
            return 1;
        }
    pin(0);
    unsigned local = 0;
    printf("# xcore: %d threads on %d cpus; per size the median fetch rate per thread\n", nthreads,
           ncpus);
    for (size_t s = minb; s <= maxb; s *= (size_t)factor) {
        int reps = reps_arg > 0 ? reps_arg : (int)((1ull << 30) / s);
        if (reps < 20) reps = 20;
        if (reps > 100000) reps = 100000;
        fetch_s = malloc((size_t)reps * sizeof(double));
        write_s = malloc((size_t)reps * sizeof(double));
        if (!fetch_s || !write_s) return 1;
        cur_bytes = s;
        cur_reps = reps;
        pthread_barrier_wait(&phase);
        run_size(0, &local);
        pthread_barrier_wait(&phase);
        qsort(fetch_s, (size_t)reps, sizeof(double), cmp_double);
        qsort(write_s, (size_t)reps, sizeof(double), cmp_double);
        double med = fetch_s[reps / 2], gbps = (double)s / med / 1e9;
        double wg = (double)s / write_s[reps / 2] / 1e9;
        printf("xcore threads %d bytes %zu GB/s %.2f write_GB/s %.2f\n", nthreads, s, gbps, wg);
        if (out) fprintf(out, "%d,%zu,%d,%.3f,%.3f\n", nthreads, s, reps, gbps, wg);
        free(fetch_s);
        free(write_s);
        if (s > SIZE_MAX / (size_t)factor) break;
    }
    atomic_store(&quit, 1);
    pthread_barrier_wait(&phase);
    for (int i = 1; i < nthreads; i++)
        pthread_join(th[i], NULL);
    /* what the fetches read, so the copies stay: thread 0 holds thread 1's last bytes */
    if (dst[0][64] != src[1 % nthreads][64]) {
        fprintf(stderr, "xcore: a fetch read the wrong bytes\n");
        return 1;
    }
    if (out) fclose(out);
    for (int i = 0; i < nthreads; i++) {
        free(shared[i]);
        free(src[i]);
        free(dst[i]);
    }
    return 0;
}
