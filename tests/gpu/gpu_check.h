/* Shared by the GPU checks (gpu_check.c, gpu_engine.c). */
#ifndef BRAID_TESTS_GPU_CHECK_H
#define BRAID_TESTS_GPU_CHECK_H

#include "braid/braid.h"

typedef struct {
    int stream_mode; /* 0 blocking, 1 stream-ordered */
    int kill_rank;   /* kill: this rank dies mid-collective */
} coll_arg_t;

/* Every collective x dtype x op x count on device buffers (mp_run's rank function). */
int coll_rank(braid_comm_t comm, int rank, int n, void *argp);
/* RESULT line: whether the device engine ran comm's calls; 1 when it should have and did not. */
int engine_report(braid_comm_t comm, int rank, int n, const char *mode);
int cmd_threads(int n);
int cmd_ringbw(int n, size_t mib);
/* gpu_robust.c: the failure-handling checks (robust WHAT). */
int cmd_robust(const char *what);

#endif
