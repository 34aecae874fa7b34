/* Multi-process test harness: runs a function on n ranks, each a real forked process with its
 * own communicator (rank 0 creates the unique id and hands it to the others through a pipe, so
 * the test process itself starts no threads before forking). Children report failures on
 * stderr and through their exit status; never call cr_assert in a child. */
#ifndef BRAID_TEST_MP_H
#define BRAID_TEST_MP_H

#include "braid/braid.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

/* Returns 0 on success, anything else is a failure (printed by the function itself). */
typedef int (*mp_fn_t)(braid_comm_t comm, int rank, int n, void *arg);

#define MP_MAX_RANKS 72

typedef struct {
    int n;
    pid_t pids[MP_MAX_RANKS];
    int status[MP_MAX_RANKS]; /* waitpid status, valid after mp_wait */
    int pipefd[2];
} mp_job_t;

/* Forks n <= MP_MAX_RANKS ranks running fn (each inits its comm, runs fn, destroys the comm, exits
 * 0 if fn returned 0, 1 if not, MP_EXIT_LEAKS if fn passed but LeakSanitizer found leaks in the
 * rank: ASan builds, tests/common/leaks.h). Does not wait. */
#define MP_EXIT_LEAKS 5
void mp_start(mp_job_t *job, int n, mp_fn_t fn, void *arg);
/* Waits for every rank up to timeout_s (then SIGKILLs the rest and marks them). Returns the
 * number of ranks that did not exit 0. */
int mp_wait(mp_job_t *job, double timeout_s);
/* mp_start + mp_wait. */
int mp_run(int n, mp_fn_t fn, void *arg, double timeout_s);

/* Child-side check: prints the failure with the rank and returns 1 from the enclosing fn. */
#define MP_CHECK(rank, cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", (rank), __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define MP_OK(rank, call)                                                                          \
    do {                                                                                           \
        braid_result_t mp_r_ = (call);                                                             \
        MP_CHECK(rank, mp_r_ == BRAID_SUCCESS, "%s -> %s: %s", #call, braid_strerror(mp_r_),       \
                 braid_last_error());                                                              \
    } while (0)

/* Inside a rank: a communicator over the same ranks on which this rank pretends to live on
 * host "fake-<host>" (BRAID_HOSTNAME, re-read by a split), with BRAID_ALGO=algo ("" = the
 * cost model). NULL (message printed) on failure. */
braid_comm_t mp_fake_host_comm(braid_comm_t comm, int rank, int host, const char *algo);

/* Number of /dev/shm segments created by the job's ranks that still exist. */
int mp_shm_leftovers(const mp_job_t *job);

#endif
