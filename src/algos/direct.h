/* Direct (single-copy) shared-memory collectives (direct.c) on the segments of
 * transport/shm_direct.h, for communicators whose ranks share one host. */
#ifndef BRAID_ALGOS_DIRECT_H
#define BRAID_ALGOS_DIRECT_H

#include "core/comm.h"

#include <stddef.h>

/* All-reduces up to this many bytes over n take the one-synchronisation path (every rank
 * reduces all n inputs itself: it reads n times the bytes). */
#define BRAID_DIRECT_SMALL_BYTES ((size_t)16384)

/* Rank r's slice of a block of len elements of es bytes over n ranks (pure): elements
 * [*off_p, *off_p + *cnt_p), q = ceil(len / n) rounded up to a cache line of elements from
 * r * q on, clipped to len (so the last slices may be short or empty). */
void braid_direct_slice(size_t len, int n, int r, size_t es, size_t *off_p, size_t *cnt_p);
/* The largest all-reduce (bytes) of the one-synchronisation path for slots of block bytes. */
size_t braid_direct_small_max(size_t block, int n);
/* Runs a direct collective (all-reduce, reduce-scatter, all-gather, broadcast, reduce) of
 * validated arguments (count > 0) on comm->direct (not NULL). */
braid_result_t braid_direct_run(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq);

/* BRAID_DIRECT_NT_SLOTS=auto (direct_pick.c): a call's choice of streaming or plain stores
 * for its copies into the slots. nt: the kind of the open block's copies. */
typedef struct {
    struct braid_nt_pick *p; /* the picker of the call's collective and size class, or NULL
                                (a forced setting, a smaller call): nt is the comm's setting */
    int idx;                 /* its index (braid_direct_set_run) */
    int nt;
    uint64_t t0;  /* when the open block began, 0 = none */
    size_t bytes; /* its bytes */
} braid_direct_pick_t;
void braid_direct_pick_init(braid_direct_pick_t *k, struct braid_comm *c, const braid_op_args_t *a);
/* A block of `bytes` begins (every block of the call, on every rank; (size_t)-1: the call
 * ended): the one before it is timed into the picker (the figures of a run are published at
 * its end), and k->nt is set for the new one. */
void braid_direct_pick_block(braid_direct_pick_t *k, struct braid_comm *c, size_t bytes);
/* BRAID_DEBUG: what the pickers measured. */
void braid_direct_log_picks(struct braid_comm *c);

#endif
