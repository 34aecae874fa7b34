/* A group of which a call failed its argument checks (see p2p.h, braid_group_reject_items).
 *
 * As NCCL aborts such a group, none of its calls is issued on the rejecting rank. Its peers,
 * though, issued theirs and would wait for this rank's part of them: so the group's calls
 * still take their numbers here and tell the peers with REJECTED messages in place of data,
 * in the order group end runs them:
 *   - each collective, in call order, as a rejected call outside a group (braid_call_reject's
 *     exchanges: on the ring for the ring/tree collectives, with every peer for those of
 *     coll_p2p.c), calls that group end would fuse as their fused call (group_fuse.c);
 *   - then the sends and receives together: one REJECTED exchange with every rank, numbered as
 *     a collective (coll BRAID_COLL_GROUP; braid_pcoll_reject_exchange), and no pair numbers.
 *     A peer's receive from this rank finds that message where it expects data, a peer's send
 *     to this rank is found by the exchange (its data where a REJECTED message should be): a
 *     mismatch either way, whatever the peer the rejected call named (a bad one too).
 * A rank whose group was rejected the same way does the same, and both see only REJECTED
 * messages: nothing ran anywhere, no pair number was taken, and the communicator stays usable.
 * Otherwise the rank that sees the difference fails the communicator and tells its peers, as
 * for any mismatch. */
#include "core/engine.h"
#include "core/log.h"
#include "core/p2p.h"

#include <stdio.h>

braid_result_t braid_group_reject_items(struct braid_comm *comm, braid_group_item_t *items, int n,
                                        const char *reason)
{
    if (comm->nranks < 2 || atomic_load(&comm->aborted) || atomic_load(&comm->error))
        return BRAID_SUCCESS; /* nothing to tell, or the peers were told already */
    braid_result_t res = BRAID_SUCCESS;
    int p2p = 0;
    for (int i = 0; i < n && res >= 0; i++) {
        braid_group_item_t *it = &items[i];
        if (it->kind == BRAID_ITEM_P2P) {
            p2p |= it->op.peer != comm->rank; /* messages to self never leave the rank */
            continue;
        }
        if (it->fused) continue;
        braid_fuse_t f; /* grouped as group end would run them (group_fuse.c) */
        braid_group_item_t fused = {.kind = BRAID_ITEM_COLL};
        if (braid_group_fuse_find(comm, items, n, i, &f)) {
            for (int j = 0; j < f.k; j++)
                items[f.idx[j]].fused = 1;
            fused.args = f.args;
            it = &fused;
        }
        uint32_t seq = ++comm->seq;
        braid_msg_hdr_t desc;
        if (it->kind == BRAID_ITEM_COLL) {
            desc = braid_engine_desc(&it->args, seq);
        } else {
            desc = (braid_msg_hdr_t){.seq = seq,
                                     .coll = (uint8_t)it->pc.coll,
                                     .dtype = (uint8_t)it->pc.dtype,
                                     .op = (uint8_t)it->pc.op,
                                     .root = it->pc.root,
                                     .count = it->pc.count};
        }
        desc.flags = BRAID_MSG_REJECTED;
        braid_engine_record(comm, &desc);
        res = it->kind == BRAID_ITEM_COLL ? braid_engine_reject(comm, &it->args, seq, reason)
                                          : braid_pcoll_reject_exchange(comm, &desc, reason, NULL);
    }
    if (res >= 0 && p2p) {
        braid_msg_hdr_t desc = {
            .seq = ++comm->seq, .coll = BRAID_COLL_GROUP, .root = -1, .flags = BRAID_MSG_REJECTED};
        braid_engine_record(comm, &desc);
        res = braid_pcoll_reject_exchange(comm, &desc, reason, NULL);
    }
    if (res < 0) braid_comm_fail_call(comm, res);
    return res;
}
