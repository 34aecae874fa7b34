/* The RDMA transport's mapping of message positions onto a connection's queue pairs
 * (src/transport/rdma_pos.h), across the uint32 position counter's wrap at 2^32: sender and
 * receiver simulated message by message. Pure arithmetic: runs without an RDMA device. */
#include "core/config.h"
#include "core/log.h"
#include "transport/rdma_pos.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#define SEQ_MASK 0x7fffffffu /* the immediate carries the position's low 31 bits (rdma_impl.h) */

/* Runs the sender and the receiver of a connection with nqps QPs from position
 * 2^32 - 4 * nqps, the receiver's per-QP expectations being those it has after that many
 * messages, for 8 * nqps messages (past the wrap). Returns the messages the receiver would
 * refuse ("message p on QP q where w was expected"). */
static int wrap_mismatches(uint32_t nqps)
{
    uint64_t start = (1ull << 32) - 4ull * nqps;
    uint32_t rx_next[8];
    for (uint32_t q = 0; q < nqps; q++) {
        /* Message first(q) + k * nqps is QP q's k-th: the first one at or after start. */
        uint64_t first = braid_rdma_pos_first((int)q);
        uint64_t k = (start - first + nqps - 1) / nqps;
        rx_next[q] = (uint32_t)(first + k * nqps);
        cr_assert_eq(braid_rdma_pos_qp(rx_next[q], nqps), (int)q, "nqps %u before the wrap", nqps);
    }
    int bad = 0;
    uint32_t pos = (uint32_t)start;
    for (uint32_t i = 0; i < 8 * nqps; i++, pos++) {
        int q = braid_rdma_pos_qp(pos, nqps); /* sender */
        cr_assert(q >= 0 && (uint32_t)q < nqps);
        uint32_t want = rx_next[q]; /* receiver: on_write */
        if ((pos & SEQ_MASK) != (want & SEQ_MASK)) {
            bad++;
            continue;
        }
        rx_next[q] = braid_rdma_pos_next(want, nqps);
    }
    return bad;
}

/* Every BRAID_IB_QPS_PER_CONN that init accepts keeps sender and receiver in step across the
 * wrap; the values whose mapping breaks there (3, 5, 6, 7: 2^32 is not a multiple of them)
 * are exactly the ones init refuses, naming the variable. */
Test(rdma, qp_of_position_across_the_wrap, .timeout = 30)
{
    for (uint32_t nqps = 1; nqps <= 8; nqps++) {
        char v[8];
        snprintf(v, sizeof(v), "%u", nqps);
        setenv("BRAID_IB_QPS_PER_CONN", v, 1);
        braid_clear_error();
        int accepted = braid_config_check_transport() == BRAID_SUCCESS;
        if (!accepted)
            cr_expect(strstr(braid_last_error(), "BRAID_IB_QPS_PER_CONN"), "nqps %u: %s", nqps,
                      braid_last_error());
        int bad = wrap_mismatches(nqps);
        int pow2 = !(nqps & (nqps - 1));
        cr_expect_eq(bad == 0, pow2, "nqps %u: %d messages refused across the wrap", nqps, bad);
        cr_expect_eq(accepted, bad == 0,
                     "nqps %u: init %s it, but %d messages are refused across the wrap", nqps,
                     accepted ? "accepts" : "refuses", bad);
    }
    unsetenv("BRAID_IB_QPS_PER_CONN");
}
