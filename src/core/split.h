/* braid_comm_split and the internal form the hierarchical algorithms use (src/core/split.c). */
#ifndef BRAID_CORE_SPLIT_H
#define BRAID_CORE_SPLIT_H

#include "core/comm.h"

/* Pure part of a split: given every rank's (color, key), the members of rank `rank`'s group
 * ordered by (key, old rank). Writes the old ranks into members (n entries available) and
 * returns the group size, or 0 if the rank's color is negative (no group). *newrank_p is the
 * rank's position in the group. */
int braid_split_group(int n, const int32_t *colors, const int32_t *keys, int rank, int *members,
                      int *newrank_p);

/* braid_comm_split without the public entry's argument checks and error reset; the new
 * communicator's log prefix keeps the parent's rank when quiet_log is set (internal
 * sub-communicators). */
braid_result_t braid_comm_split_internal(struct braid_comm *comm, int color, int key, int quiet_log,
                                         struct braid_comm **newcomm_p);
/* 1 while this thread initializes an internal sub-communicator (quiet_log): it takes its
 * parent's model constants, so it neither reads a tuning file nor measures links. */
int braid_split_is_internal(void);
/* The host identity of this rank in the parent of the internal sub-communicator being
 * initialized (NULL otherwise): sub-communicators keep their parent's host grouping even if
 * the environment (BRAID_HOSTNAME) changed since. */
const char *braid_split_parent_host(void);

#endif
