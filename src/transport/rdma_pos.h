/* RDMA transport: where message pos of a connection travels (pure arithmetic, no verbs; unit
 * tested in tests/unit/test_rdma_pos.c).
 *
 * A connection has nqps queue pairs (BRAID_IB_QPS_PER_CONN). The sender writes message pos on
 * QP pos % nqps. Each QP delivers its messages in order, so the receiver expects QP q's first
 * message at position q and, after message `want` arrived on it, message want + nqps next.
 * Positions are uint32 counters that wrap at 2^32: the two rules agree across the wrap only
 * when nqps divides 2^32, that is when nqps is a power of two (src/core/config.c refuses the
 * other values at init). With nqps = 3, 2^32 is 1 mod 3: message 2^32 (position 0 again) goes
 * on QP 0 where the receiver expects 2^32 - 1 + 3 = 2. */
#ifndef BRAID_TRANSPORT_RDMA_POS_H
#define BRAID_TRANSPORT_RDMA_POS_H

#include <stdint.h>

/* The QP that carries message pos. */
static inline int braid_rdma_pos_qp(uint32_t pos, uint32_t nqps)
{
    return (int)(pos % nqps);
}

/* The position of the first message on QP q. */
static inline uint32_t braid_rdma_pos_first(int q)
{
    return (uint32_t)q;
}

/* The position expected next on a QP after message `want` arrived on it. */
static inline uint32_t braid_rdma_pos_next(uint32_t want, uint32_t nqps)
{
    return want + nqps;
}

#endif
