/* Transport conformance: drives one transport's vtable (transport/transport.h) directly, not
 * through collectives, between the two ranks of a communicator. The same cases run on every
 * compiled transport: shm and tcp in the Criterion suite (tests/mp/test_conformance.c), rdma
 * inside the Soft-RoCE VM (tests/helpers/conformance_main.c, tests/rdma/inner.sh).
 *
 * Cases (every rank of the 2-rank communicator runs the same case):
 *   data      connection setup; messages of 0, 1, odd, slot-1 and exactly slot bytes, many
 *             times around the slot FIFO (credit flow), both directions interleaved, headers
 *             and payloads checked against a (rank, index, byte)-dependent pattern; twice,
 *             small slots x 4 and 64 KiB slots x 2; then where the transport has direct
 *             receives (recv_peek / recv_into), 64 KiB x 4 with every payload taken into an
 *             odd-aligned caller buffer (guard bytes checked), every fifth message still
 *             arriving given back with recv_undirect; at the end send_inflight is 0
 *   fail      each rank fail()s its send connection with a text; the peer's receive wait
 *             returns BRAID_ERR_REMOTE carrying that text
 *   failrecv  rank 1 fills its FIFO; rank 0 fail()s its receive connection; rank 1's send wait
 *             returns BRAID_ERR_REMOTE carrying the text
 *   kill      rank 1 SIGKILLs itself; rank 0's receive wait returns BRAID_ERR_REMOTE naming it
 *   close     rank 1 closes both connections and exits; rank 0's receive wait and (FIFO full)
 *             send wait return BRAID_ERR_REMOTE naming it
 *   timeout   rank 1 stays silent; rank 0's wait() honours its deadlines and a 1 s budget ends
 *             in BRAID_ERR_TIMEOUT (as the engine does), receive and send (FIFO full) sides
 *   abort     rank 0 waits with a 20 s deadline; another thread sets a flag and calls wake():
 *             the wait returns within 0.5 s
 *   register  braid_comm_register: overlapping and empty registrations, all-reduce and
 *             all-gather on registered buffers (exact results), the rdma registration cache
 *             holding them (none on other transports), bad arguments and double deregister
 *             refused, one handle left registered for braid_comm_destroy
 * The victim of kill exits by SIGKILL; everything else exits 0 when the case passes. */
#ifndef BRAID_TEST_CONFORMANCE_H
#define BRAID_TEST_CONFORMANCE_H

#include "braid/braid.h"

/* Zero-copy along a ring of any size (not one of the 2-rank cases): all-gather and broadcast
 * from every root into a registered output, results checked exactly; with transport "rdma",
 * every rank must have received all but the first FIFO-full of each broadcast's chunks
 * zero-copy (middle ranks forward from their output). 0 = pass. */
int conf_ring_zc(braid_comm_t comm, const char *transport);

/* Zero-copy exposures (tests/common/conf_zc.c), any transport, results checked exactly:
 *   zcsmall  100 all-gathers of 1 element (ring, BRAID_NCHANNELS=2: channel 0's slice is
 *            empty) into a registered output, each within 2.5 s (BRAID_TIMEOUT=5 in the VM)
 *   zcbcast  200 broadcasts of 4 KiB from rank 0 into a registered output (the root receives
 *            nothing), none over 2 s
 *   (inner.sh also checks that no RNR NAK happened during these two)
 *   zclate   2 ranks: rank 1's all-gather into a registered output times out (2 s) before rank
 *            0 calls it (3 s late); rank 1 fills its output with a sentinel, which must stay
 *            intact for 4 s while rank 0's late all-gather runs (and fails)
 * 0 = pass. */
int conf_zc_small(braid_comm_t comm, const char *transport);
int conf_zc_bcast(braid_comm_t comm, const char *transport);
int conf_zc_late(braid_comm_t comm, const char *transport);

/* NULL-terminated list of the case names above. */
extern const char *const conf_cases[];

/* Runs case `name` over transport `transport` ("shm", "tcp", "rdma") on this rank of a 2-rank
 * communicator. 0 = pass; otherwise the failure was printed on stderr with the rank. */
int conf_run(braid_comm_t comm, const char *transport, const char *name);

#endif
