/* Settings every rank of a communicator must share (src/core/settings.c). */
#ifndef BRAID_CORE_SETTINGS_H
#define BRAID_CORE_SETTINGS_H

#include "core/comm.h"

/* At init, after read_tuning and the bootstrap: reads BRAID_DIRECT_BLOCK into
 * c->direct_block (and direct_block_auto), takes the settings of the parent set
 * by braid_settings_inherit on this thread, then compares the settings that
 * shape connections, plans and the cost model across the ranks (one bootstrap
 * allgather). A mismatch fails on every rank alike with BRAID_ERR_INVALID_USAGE
 * naming the variable, the first rank that differs from rank 0 and both values.
 */
braid_result_t braid_settings_agree(struct braid_comm *c);

/* Sub-communicators initialized on this thread until
 * braid_settings_inherit(NULL) take parent's settings instead of the
 * environment's (hier's sub-communicators, made on first use: a rank's
 * environment may have changed since the parent's init). */
void braid_settings_inherit(const struct braid_comm *parent);
/* That parent, NULL when none: init then takes its shared settings (BRAID_TIMEOUT, CHUNK_SIZE,
 * NSLOTS, NCHANNELS, TRANSPORT, ALGO and those of braid_settings_agree) without reading or
 * checking the environment's, and its bootstrap watches the parent's abort flag. */
const struct braid_comm *braid_settings_parent(void);

#endif
