/* membw: the machine's memory bandwidth, measured the way the shared-memory reports need it
 * for their roofline: copy (b = a) and add (c = a + b, float32) over buffers well beyond the
 * last-level cache, with 1 and with T threads (each on its own contiguous part), bytes read
 * plus bytes written per second, best of R repetitions after a warm-up pass that faults every
 * page in.
 *
 *   membw [-s BYTES] [-t THREADS] [-r REPS] [-p] [--csv FILE]
 *
 * Prints one line per kernel and thread count:
 *   membw copy threads 1 GB/s 12.34
 * (GB = 1e9 bytes). Defaults: 256 MiB per buffer, T = the cpus this process may run on, R = 5.
 * -p: BYTES per thread instead of in all (each thread copies its own BYTES, as every rank of an
 * all-reduce of BYTES reads its input and writes its output): T x BYTES per buffer; T may exceed
 * the cpus, as ranks do. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parse_bytes.h"

typedef struct {
    float *a, *b, *c;
    size_t lo, hi; /* element range */
    int kind;      /* 0 copy, 1 add */
    pthread_barrier_t *start;
} part_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_part(const part_t *p)
{
    if (p->kind == 0) {
        memcpy(p->b + p->lo, p->a + p->lo, (p->hi - p->lo) * sizeof(float));
        return;
    }
    float *restrict c = p->c;
    const float *restrict a = p->a, *restrict b = p->b;
    for (size_t i = p->lo; i < p->hi; i++)
        c[i] = a[i] + b[i];
}

static void *worker(void *arg)
{
    part_t *p = arg;
    pthread_barrier_wait(p->start);
    run_part(p);
    return NULL;
}

/* One pass of kind over n elements with t threads: seconds. */
static double pass(float *a, float *b, float *c, size_t n, int t, int kind)
{
    pthread_t th[64];
    part_t parts[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)t);
    for (int i = 0; i < t; i++)
        parts[i] = (part_t){
            a, b, c, n * (size_t)i / (size_t)t, n * (size_t)(i + 1) / (size_t)t, kind, &start};
    for (int i = 1; i < t; i++)
        if (pthread_create(&th[i], NULL, worker, &parts[i]) != 0) {
            fprintf(stderr, "membw: pthread_create failed\n");
            exit(1);
        }
    pthread_barrier_wait(&start);
    double t0 = now_s();
    run_part(&parts[0]);
    for (int i = 1; i < t; i++)
        pthread_join(th[i], NULL);
    double el = now_s() - t0;
    pthread_barrier_destroy(&start);
    return el;
}

int main(int argc, char **argv)
{
    size_t bytes = 256u << 20;
    int threads = 0, reps = 5, per_thread = 0;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            bytes = parse_bytes(argv[++i]);
            if (!bytes) {
                fprintf(stderr, "membw: -s %s is not a size (bytes, or with K, M, G)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p"))
            per_thread = 1;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else {
            fprintf(stderr, "usage: membw [-s BYTES] [-t THREADS] [-r REPS] [-p] [--csv FILE]\n");
            return 2;
        }
    }
    if (threads <= 0) {
        cpu_set_t set;
        threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    if (threads > 64) threads = 64;
    if (reps < 1) reps = 1;
    size_t per = bytes / sizeof(float), n = per_thread ? per * (size_t)threads : per;
    if (per_thread && per > SIZE_MAX / sizeof(float) / (size_t)threads) {
        fprintf(stderr, "membw: -s %zu x %d threads does not fit in memory\n", bytes, threads);
        return 2;
    }
    if (n < (size_t)threads) {
        fprintf(stderr, "membw: -s %zu is too small\n", bytes);
        return 2;
    }
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)),
          *c = malloc(n * sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "membw: out of memory for 3 x %zu bytes\n", n * sizeof(float));
        return 1;
    }
    for (size_t i = 0; i < n; i++) { /* faults every page in, values that never overflow */
        a[i] = (float)(i % 1000);
        b[i] = 1.0f;
        c[i] = 0.0f;
    }
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        fprintf(stderr, "membw: cannot write %s\n", csv);
        return 1;
    }
    if (out) fprintf(out, "kernel,threads,bytes_moved,GBps\n");
    static const char *names[2] = {"copy", "add"};
    static const int moved[2] = {2, 3}; /* buffers touched per element: read + written */
    int counts[2] = {1, threads};
    for (int k = 0; k < 2; k++)
        for (int ti = 0; ti < (threads > 1 ? 2 : 1); ti++) {
            int t = counts[ti];
            size_t m = per_thread ? per * (size_t)t : n; /* elements this pass moves */
            double best = 1e30;
            pass(a, b, c, m, t, k); /* warm-up */
            for (int r = 0; r < reps; r++) {
                double el = pass(a, b, c, m, t, k);
                if (el < best) best = el;
            }
            double mb = (double)moved[k] * (double)(m * sizeof(float));
            printf("membw %s threads %d GB/s %.2f\n", names[k], t, mb / best / 1e9);
            if (out) fprintf(out, "%s,%d,%.0f,%.3f\n", names[k], t, mb, mb / best / 1e9);
        }
    /* the add's result, so the compiler keeps it (the copy made b = a) */
    if (c[n / 2] != a[n / 2] + b[n / 2]) {
        fprintf(stderr, "membw: the add computed a wrong value\n");
        return 1;
    }
    if (out) fclose(out);
    free(a);
    free(b);
    free(c);
    return 0;
}
