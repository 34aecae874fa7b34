/* perf_selftest's fake world (selftest_fake.c): braid's element semantics computed the slow way,
 * and a backend that runs N ranks as threads of one process. */
#ifndef BRAID_PERF_SELFTEST_H
#define BRAID_PERF_SELFTEST_H

#include "common.h"

#include <pthread.h>

#define FAKE_MAX_RANKS 32
#define FAKE_NCOLLS 10

/* dst[di] = src[0][off] op src[1][off] op ... (rank order), with braid's semantics: integers
 * wrap; float16/bfloat16/float8 combine in float32 and round to the dtype after each pair; avg
 * scales float16/bfloat16/float8 by (float)(1/n) first and divides the others' sum at the end. */
void ref_reduce(int dt, int op, int n, const void *const *src, size_t off, void *dst, size_t di);

typedef struct {
    int n, bug, device; /* bug: the last rank corrupts an element; device: fake --device buffers */
    uint64_t sums[64];  /* a hash of rank 0's input at each call, while nsums < 64 */
    int nsums;
    pthread_barrier_t bar;
    struct {
        const void *send;
        int64_t i64;
        double f64;
    } post[FAKE_MAX_RANKS];
} fake_world_t;

/* Runs the bench loop on n thread-ranks; returns the worst exit code. fake_run_in also copies
 * the world out (its input hashes) into *wp when wp is not NULL. */
int fake_run(int n, int bug, const perf_coll_t *coll, const perf_opts_t *opts);
int fake_run_in(fake_world_t *wp, int n, int bug, const perf_coll_t *coll, const perf_opts_t *opts);

extern const perf_coll_t *const fake_colls[FAKE_NCOLLS];
const perf_coll_t *coll_by_name(const char *s); /* NULL if unknown */

#endif
