/* The NCCL test client: a program written against nccl.h only (no braid header), as a user's
 * NCCL program is. It runs as one rank of a job under braid-run (tests/mp/test_nccl.c starts
 * it with 1..8 ranks); see client.c for its command line. */
#ifndef BRAID_TEST_NCCL_CLIENT_H
#define BRAID_TEST_NCCL_CLIENT_H

#include "nccl.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int g_rank, g_nranks;
/* --require-fp8, --require-premulsum: a float8 datatype or PreMulSum op that braid refuses as
 * unsupported fails the test instead of being skipped. */
extern int require_fp8, require_premulsum;

/* Prints the failure with the rank and returns 1 from the enclosing function. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", g_rank, __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define NCCLOK(call)                                                                               \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == ncclSuccess, "%s -> %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_),      \
              ncclGetLastError(NULL));                                                             \
    } while (0)

/* Expects call to return want with a last-error message that contains word. */
#define EXPECT(call, want, word)                                                                   \
    do {                                                                                           \
        ncclResult_t e_ = (call);                                                                  \
        const char *m_ = ncclGetLastError(NULL);                                                   \
        CHECK(e_ == (want) && strstr(m_, (word)), "%s -> %d '%s' (want %d naming '%s')", #call,    \
              (int)e_, m_, (int)(want), (word));                                                   \
    } while (0)

/* ---- data.c: inputs from (rank, index, seed) and an independent reference --------------- */
size_t dt_size(ncclDataType_t dt);
const char *dt_name(ncclDataType_t dt);
const char *op_name(ncclRedOp_t op);
/* Rank r's input at index i for a reduction op over n ranks (exactly representable in dt,
 * chosen so that every partial result is exact too). */
double in_value(ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t i, int seed);
/* Stores v (exactly representable) as element i of buf. */
void store(void *buf, ncclDataType_t dt, size_t i, double v);
/* Fills buf[0..count) with rank r's inputs for indexes base.. base+count-1. */
void fill(void *buf, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t base, size_t count,
          int seed);
/* The reduction over ranks 0..n-1 of index i, stored into out[0] (wrapping for integers). */
void expect_reduced(void *out, ncclDataType_t dt, ncclRedOp_t op, int n, size_t i, int seed,
                    double premul);
/* Number of elements of got (indexes base..) that differ bit for bit from the reduction
 * (premul: the PreMulSum scalar, or 0 for op itself); the first few are printed. */
size_t check_reduced(const void *got, ncclDataType_t dt, ncclRedOp_t op, int n, size_t base,
                     size_t count, int seed, double premul, const char *what);
/* The same against rank src's inputs. */
size_t check_rank(const void *got, ncclDataType_t dt, ncclRedOp_t op, int src, int n, size_t base,
                  size_t count, int seed, const char *what);

/* ---- tests (client.c, client_coll.c, client_comm.c, client_p2p.c) ---------------------------- */
/* CLOCK_MONOTONIC in seconds. */
double now_s(void);
/* An id for a new communicator over world's ranks: rank 0 makes it, the others get it by an
 * ncclBroadcast on world. */
int shared_id(ncclComm_t world, ncclUniqueId *id);
/* Communicators closed by another thread during calls (client_p2p.c). */
int test_close(ncclComm_t world);
/* Aborts of running inits, run alone (client_p2p.c). */
int test_abort_init(void);
/* NCCL_COMM_BLOCKING=0 in the environment, run alone (client_p2p.c). */
int test_env_blocking(void);
/* nccl.conf and the lazy NCCL_COMM_BLOCKING, run alone (client_env.c). */
int test_env_conf(void);
/* Every datatype x op x count through the collectives (client_coll.c). */
int test_coll(ncclComm_t world);
/* PreMulSum ops (client_coll.c). */
int test_premulsum(ncclComm_t world);
/* Non-blocking and grouped inits, splits, ncclCommInitAll, argument errors (client_comm.c). */
int test_nonblocking(ncclComm_t world);
int test_split(ncclComm_t world);
int test_initall(ncclComm_t world);
int test_errors(ncclComm_t world);
int test_p2p(ncclComm_t comm);
int test_groups(ncclComm_t comm);
int test_refused(ncclComm_t world);
/* Inits and splits in groups, blocking modes, config checks (client_init.c). */
int test_inits(ncclComm_t world);
/* An all-reduce on c (rank, n: its rank and size) checked against the reference (client.c). */
int allreduce_check(ncclComm_t c, int rank, int n, int seed, const char *what);

#endif
