/* The host loop of the device engine, shared by the GPU executor and the CPU twin: runs a
 * rank's lanes until every one is done, relaunching those that returned BLOCKED (bounded spins,
 * engine_dev.h), so ranks that never run at the same time (processes time-sliced on one GPU)
 * still progress. Between runs it checks the rank's own failures (abort, dead peers: the
 * caller's check), a timeout without progress, and gives the processor away when nothing
 * moved. Every failure comes back as a braid_result_t with a message naming the rank, the
 * lane, the step and the peer. */
#ifndef BRAID_CUDA_DEVDRIVE_H
#define BRAID_CUDA_DEVDRIVE_H

#include "braid/braid.h"
#include "cuda/engine_dev.h"

#include <stdint.h>

#define BRAID_DEV_MAX_LANES_DRIVE 64 /* = BRAID_DEV_MAX_LANES */

typedef struct {
    /* Runs every unfinished lane once (each wait polls at most budget times) and returns once
     * that run has ended (the GPU: a kernel launch and its completion); an error stops. */
    braid_result_t (*launch)(void *ctx, uint64_t budget);
    /* Between runs (may be NULL): the rank's abort flag, dead peers, errors peers reported. */
    braid_result_t (*check)(void *ctx);
    /* No lane advanced in `idle` (>= 1) consecutive runs (may be NULL): yield or sleep. */
    void (*idle)(void *ctx, unsigned idle);
} braid_dev_drive_ops_t;

typedef struct {
    int rank, nranks, nblk;
    const int *order; /* ring order (peer names in messages), NULL = identity */
    const char *what; /* the call, e.g. "allreduce #7" */
    double timeout_s; /* no lane advanced for this long: BRAID_ERR_TIMEOUT (<= 0: none) */
    uint64_t budget;  /* polls per wait in one run */
    int nlanes;
    uint32_t seq;
    const braid_dev_report_t *reports; /* nlanes, written by the lanes (volatile to us) */
    /* state (braid_dev_drive_begin) and statistics */
    uint64_t runs;  /* launches */
    uint64_t idles; /* launches after which no lane had advanced */
    uint64_t last_ns;
    unsigned idle;
    uint32_t prev[BRAID_DEV_MAX_LANES_DRIVE];
} braid_dev_drive_t;

/* Runs until every lane is done or an error: begin, then steps. */
braid_result_t braid_dev_drive(braid_dev_drive_t *d, const braid_dev_drive_ops_t *ops, void *ctx);
/* The same one launch at a time (the twin's serial runs interleave ranks with it): step
 * returns 1 when every lane is done, 0 when some are blocked, or an error. */
braid_result_t braid_dev_drive_begin(braid_dev_drive_t *d);
int braid_dev_drive_step(braid_dev_drive_t *d, const braid_dev_drive_ops_t *ops, void *ctx);

/* Reads lane l's report as the lanes publish it (status and pc with acquire). */
void braid_dev_report_read(const braid_dev_report_t *r, int32_t *status_p, uint32_t *pc_p);
/* The error of lane l's report (its status < 0) as a braid_result_t with the message set. */
braid_result_t braid_dev_lane_error(const braid_dev_drive_t *d, int l);

#endif
