/* Plans of the collectives that run on the send/recv connections (core/p2p.h): each is a list
 * of point-to-point operations that the batch runner progresses at the same time.
 *
 * Blocks. es = the dtype's size; with n ranks and this rank r, the operations are, for every
 * round k = 1..n-1 with dst = (r + k) mod n and src = (r - k) mod n (every pair exchanges in
 * both directions at once; a rank's sends are spread over distinct peers):
 *   alltoall(count):        COPY  send[r*count] -> recv[r*count] (none in place);
 *                           SEND  send[dst*count], count to dst; RECV recv[src*count] from src
 *   alltoallv:              the same with sendcounts[dst] at sdispls[dst] and
 *                           recvcounts[src] at rdispls[src] (each message's count on its header,
 *                           so a pair that disagrees on a count is a mismatch)
 *   gather(count, root):    non-root SEND send[0..count) to root; the root RECVs rank i's at
 *                           recv[i*count] and COPYs its own (nothing when in place)
 *   scatter(count, root):   the root SENDs send[i*count] to rank i and COPYs its own block;
 *                           the others RECV recv[0..count) from root
 *   allgatherv:             COPY send -> recv[displs[r]] (nothing when in place); SEND send to
 *                           dst; RECV recvcounts[src] at recv[displs[src]] from src
 *   reduce_scatterv(op):    block i starts at off_i = recvcounts[0] + ... + recvcounts[i-1];
 *                           SEND send[off_dst] (recvcounts[dst]) to dst; one RECV_REDUCE that
 *                           folds block r of every rank in rank order into recv
 * Offsets above are in elements. */
#include "core/log.h"
#include "core/p2p.h"

#include <stdlib.h>

static braid_result_t add(braid_p2p_batch_t *b, const braid_pcoll_t *pc, uint32_t seq, int kind,
                          int peer, const void *sbuf, void *rbuf, size_t count)
{
    braid_p2p_op_t op = {.kind = (uint8_t)kind,
                         .peer = peer,
                         .sbuf = sbuf,
                         .rbuf = rbuf,
                         .count = count,
                         .dtype = pc->dtype,
                         .coll = pc->coll,
                         .seq = seq,
                         .op = pc->op,
                         .root = pc->root};
    return braid_p2p_batch_add(b, &op);
}

braid_result_t braid_pcoll_plan(const braid_pcoll_t *pc, int n, int r, uint32_t seq,
                                braid_p2p_batch_t *b)
{
    size_t es = braid_dtype_size(pc->dtype), c = pc->count;
    const char *s = pc->sendbuf;
    char *o = pc->recvbuf;
    switch (pc->coll) {
    case BRAID_COLL_ALLTOALL:
        if (!pc->own_in_place)
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_COPY, r, s + (size_t)r * c * es,
                            o + (size_t)r * c * es, c));
        for (int k = 1; k < n; k++) {
            int dst = (r + k) % n, src = (r - k + n) % n;
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_SEND, dst, s + (size_t)dst * c * es, NULL, c));
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_RECV, src, NULL, o + (size_t)src * c * es, c));
        }
        return BRAID_SUCCESS;
    case BRAID_COLL_ALLTOALLV:
        BRAID_CHECK(add(b, pc, seq, BRAID_P2P_COPY, r, s + pc->sdispls[r] * es,
                        o + pc->rdispls[r] * es, pc->recvcounts[r]));
        for (int k = 1; k < n; k++) {
            int dst = (r + k) % n, src = (r - k + n) % n;
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_SEND, dst, s + pc->sdispls[dst] * es, NULL,
                            pc->sendcounts[dst]));
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_RECV, src, NULL, o + pc->rdispls[src] * es,
                            pc->recvcounts[src]));
        }
        return BRAID_SUCCESS;
    case BRAID_COLL_GATHER:
        if (r != pc->root) return add(b, pc, seq, BRAID_P2P_SEND, pc->root, s, NULL, c);
        BRAID_CHECK(add(b, pc, seq, BRAID_P2P_COPY, r, s, o + (size_t)r * c * es, c));
        for (int k = 1; k < n; k++) {
            int src = (r + k) % n;
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_RECV, src, NULL, o + (size_t)src * c * es, c));
        }
        return BRAID_SUCCESS;
    case BRAID_COLL_SCATTER:
        if (r != pc->root) return add(b, pc, seq, BRAID_P2P_RECV, pc->root, NULL, o, c);
        BRAID_CHECK(add(b, pc, seq, BRAID_P2P_COPY, r, s + (size_t)r * c * es, o, c));
        for (int k = 1; k < n; k++) {
            int dst = (r + k) % n;
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_SEND, dst, s + (size_t)dst * c * es, NULL, c));
        }
        return BRAID_SUCCESS;
    case BRAID_COLL_ALLGATHERV:
        BRAID_CHECK(add(b, pc, seq, BRAID_P2P_COPY, r, s, o + pc->rdispls[r] * es, c));
        for (int k = 1; k < n; k++) {
            int dst = (r + k) % n, src = (r - k + n) % n;
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_SEND, dst, s, NULL, c));
            BRAID_CHECK(add(b, pc, seq, BRAID_P2P_RECV, src, NULL, o + pc->rdispls[src] * es,
                            pc->recvcounts[src]));
        }
        return BRAID_SUCCESS;
    case BRAID_COLL_REDUCE_SCATTERV: {
        size_t off = 0, mine = 0;
        size_t *offs = calloc((size_t)n, sizeof(*offs));
        if (!offs) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for %d offsets", n);
        for (int i = 0; i < n; i++) {
            offs[i] = off;
            off += pc->recvcounts[i];
        }
        mine = offs[r];
        braid_result_t res = BRAID_SUCCESS;
        for (int k = 1; k < n && res >= 0; k++) {
            int dst = (r + k) % n;
            res =
                add(b, pc, seq, BRAID_P2P_SEND, dst, s + offs[dst] * es, NULL, pc->recvcounts[dst]);
        }
        free(offs);
        BRAID_CHECK(res);
        return add(b, pc, seq, BRAID_P2P_RECV_REDUCE, -1, s + mine * es, o, pc->recvcounts[r]);
    }
    }
    return braid_set_error(BRAID_ERR_INTERNAL, "no point-to-point plan for %s",
                           braid_coll_name(pc->coll));
}
