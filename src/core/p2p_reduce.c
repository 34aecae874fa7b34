/* reduce_scatterv's receive (RECV_REDUCE) for the runner of p2p.c: chunk k of every peer,
 * folded in rank order with this rank's, so every rank's slice is bit-identical to a reduce's. */
#include "core/p2p_impl.h"
#include "core/log.h"
#include "core/redop.h"
#include "reduce/reduce.h"

#include <string.h>

braid_redop_t braid_p2p_kernel_op(const braid_p2p_op_t *op)
{
    int scaled = op->op == BRAID_OP_WIRE_PREMULSUM ||
                 (op->op == BRAID_AVG && braid_reduce_avg_prescales(op->dtype));
    return scaled ? BRAID_SUM : op->op;
}

braid_result_t braid_p2p_step_reduce(struct braid_comm *comm, braid_p2p_op_t *op,
                                     const void **rr_buf, const braid_msg_hdr_t **rr_hdr,
                                     char *rr_own, int *wait_peer, int *moved)
{
    struct braid_p2p_state *st = comm->p2p;
    int n = comm->nranks, me = comm->rank;
    *wait_peer = -1;
    size_t es = braid_dtype_size(op->dtype), bytes = braid_p2p_op_bytes(op);
    while (!(op->nmsgs && op->off >= bytes)) {
        size_t nb = bytes - op->off < st->chunk ? bytes - op->off : st->chunk;
        int missing = 0;
        for (int p = 0; p < n; p++) {
            if (p == me || rr_buf[p]) continue;
            braid_conn_t *c = st->recv[p];
            if (c->ops->progress) BRAID_CHECK(c->ops->progress(c));
            braid_result_t res = c->ops->recv_get(c, &rr_hdr[p], &rr_buf[p]);
            if (res == BRAID_INPROGRESS) {
                rr_buf[p] = NULL;
                if (!missing++) *wait_peer = op->peer = p; /* op->peer: for the wait's messages */
                continue;
            }
            BRAID_CHECK(res);
            if (rr_hdr[p]->flags & BRAID_MSG_NOTICE) {
                char mine[200];
                braid_p2p_op_str(op, mine, sizeof(mine));
                BRAID_CHECK(braid_p2p_take_notice(comm, p, rr_hdr[p], op->seq, "called", mine));
                rr_buf[p] = NULL;
                *moved = 1;
                missing++; /* its chunk comes next */
                continue;
            }
            BRAID_CHECK(braid_p2p_check_msg(comm, op, p, rr_hdr[p], rr_buf[p], rr_hdr[p]->bytes,
                                            nb ? nb : 0));
            if (rr_hdr[p]->flags & BRAID_MSG_CMA) /* never sent to a reducing receive */
                return braid_set_error(BRAID_ERR_INTERNAL, "rank %d sent a CMA descriptor to %s", p,
                                       "a reduce_scatterv");
            if (!nb && rr_hdr[p]->bytes)
                return braid_set_error(BRAID_ERR_INTERNAL, "rank %d sent %u bytes, expected 0", p,
                                       rr_hdr[p]->bytes);
            *moved = 1;
        }
        if (missing) return BRAID_INPROGRESS;
        size_t cnt = nb / es;
        char *out = (char *)op->rbuf + op->off;
        const char *own = (const char *)op->sbuf + op->off;
        if (cnt && rr_own && own == out) {
            memcpy(rr_own, own, nb); /* in place: the fold overwrites it before its turn */
            own = rr_own;
        }
        braid_redop_t kop = braid_p2p_kernel_op(op);
        for (int i = 1; cnt && i < n; i++) {
            const void *left = i == 1 ? (me == 0 ? own : rr_buf[0]) : out;
            const void *right = i == me ? own : rr_buf[i];
            if (i == n - 1)
                braid_reduce_pair_final(op->dtype, kop, out, left, right, cnt, n);
            else
                braid_reduce_pair(op->dtype, kop, out, left, right, cnt);
        }
        for (int p = 0; p < n; p++) {
            if (p == me) continue;
            rr_buf[p] = NULL;
            BRAID_CHECK(st->recv[p]->ops->recv_release(st->recv[p]));
        }
        op->off += nb;
        op->nmsgs++;
        *moved = 1;
    }
    return BRAID_SUCCESS;
}
