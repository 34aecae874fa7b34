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
/* BRAID_DEBUG: what the pickers of streaming or plain stores into the slots measured. */
void braid_direct_log_picks(struct braid_comm *c);

#endif
