/* BRAID_TRACE=file.json: a timeline of every call and step on every rank, written as one
 * Chrome trace (chrome://tracing, ui.perfetto.dev) per job.
 *
 * Off (the default) it costs one load of a global flag per call and per step. On, each
 * process records into one buffer (every communicator it has, sub-communicators of the
 * hierarchical algorithms included): calls (collectives, point-to-point operations) with
 * their sequence number, count, dtype, op, algorithm and bytes; the engine's steps (one per
 * chunk and primitive) with the peers they send to and receive from. The process's first
 * top-level communicator owns the buffer: braid_comm_destroy on it gathers every rank's
 * events to its rank 0, which writes the file (timestamps on one clock: each rank's wall
 * clock, relative to the earliest event of the job). A rank that cannot take part (the
 * communicator failed) writes its own events to file.json.rank<R> instead, as does a process
 * that exits without destroying it. */
#ifndef BRAID_CORE_TIMELINE_H
#define BRAID_CORE_TIMELINE_H

#include "braid/braid.h"

#include <stdint.h>

struct braid_comm;

/* Set while a timeline is recorded (read without a lock: the fast check). */
extern int braid_timeline_on;

typedef struct {
    const char *name; /* static string: a collective's or a primitive's name */
    uint64_t t0, t1;  /* braid_now_ns() */
    uint64_t bytes;   /* payload moved (a step: its chunk; a call: the input) */
    uint64_t count;   /* a call: elements */
    uint32_t seq;
    int16_t dtype, op, algo; /* -1: not applicable */
    int16_t kind;            /* BRAID_TL_CALL, BRAID_TL_P2P, BRAID_TL_STEP */
    int16_t channel;
    int32_t send_peer, recv_peer; /* -1: none */
    int32_t root;                 /* -1: none */
} braid_tl_event_t;

enum { BRAID_TL_CALL = 0, BRAID_TL_P2P = 1, BRAID_TL_STEP = 2 };

/* At the end of a communicator's init: starts recording when BRAID_TRACE is set (the first
 * top-level communicator of the process owns the timeline) and gives the communicator its
 * index among the recorded ones (its rows in the trace). */
void braid_timeline_comm_init(struct braid_comm *comm);
/* Records one event of comm (fills nothing else in ev). */
void braid_timeline_add(struct braid_comm *comm, const braid_tl_event_t *ev);
/* At the start of braid_comm_destroy: on the owner, gathers and writes the file (or the
 * per-rank fallback) and stops recording. */
void braid_timeline_comm_destroy(struct braid_comm *comm);

static inline int braid_timeline_enabled(void)
{
    return __atomic_load_n(&braid_timeline_on, __ATOMIC_RELAXED);
}

#endif
