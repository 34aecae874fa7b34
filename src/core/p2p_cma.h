/* Single-copy point-to-point messages between processes of one host (p2p_cma.c).
 *
 * A send of at least BRAID_P2P_CMA_MIN bytes to a peer that can read this process's memory
 * (Cross Memory Attach, probed per peer at init) travels as one header-only message: the
 * usual braid_msg_hdr_t (identity checked by the receiver exactly as for a chunked message)
 * with flag BRAID_MSG_CMA and a braid_cma_desc_t as payload. The receiver publishes its own
 * buffer's address in that descriptor (its slot is shared memory both ends map), and from then
 * on both ends copy: the receiver with process_vm_readv, the sender, while it waits for the
 * release, with process_vm_writev (when its probe could read the receiver: the same ptrace
 * permission). Each takes the next piece of BRAID_P2P_CMA_PIECE bytes with a fetch-and-add on
 * the descriptor's claim offset and adds what it copied to its done count; the runner checks
 * abort and progresses its other connections between pieces. Whichever end has a cpu does the
 * work: with ranks bound two per cpu, a receiver whose cpu is busy no longer holds a sender
 * that idles on the other one. Once every piece is claimed the receiver waits for the done
 * count to reach the size (a piece the sender is copying), checks that the sender has not
 * failed meanwhile, then releases the slot; the send completes when the transport reports
 * every posted slot released (send_released). Until then the caller's buffer is read in place,
 * so a send is never complete before its data has arrived. */
#ifndef BRAID_CORE_P2P_CMA_H
#define BRAID_CORE_P2P_CMA_H

#include "core/p2p.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define BRAID_CMA_MAGIC 0x434d4131u /* "CMA1" */

/* The payload of a BRAID_MSG_CMA message, in the sender's slot (8-byte aligned). The first
 * four fields are written by the sender before it posts and never change; the atomics are
 * shared by both ends until the receiver releases the slot. */
typedef struct {
    uint64_t addr;          /* the sender's buffer in its address space */
    uint64_t bytes;         /* its size: the whole operation */
    int32_t pid;            /* the sender's pid, as the probe exchange gave it */
    uint32_t magic;         /* BRAID_CMA_MAGIC */
    _Atomic uint64_t dst;   /* the receiver's buffer in its address space; 0 until set */
    _Atomic uint64_t claim; /* offset of the next piece to copy (fetch-and-add) */
    _Atomic uint64_t done;  /* bytes copied, by either end (+ BRAID_CMA_DONE_FAILED) */
} braid_cma_desc_t;

/* Added to done with the size of a piece the sender failed to write: the piece counts as
 * finished (nothing more will be written) and the message as failed. */
#define BRAID_CMA_DONE_FAILED ((uint64_t)1 << 62)

typedef struct braid_p2p_cma {
    uint8_t *send_ok; /* per peer: sends of >= min_bytes to it go by CMA */
    uint8_t *recv_ok; /* per peer: this rank's probe read that peer's memory */
    int32_t *pid;     /* per peer: its pid as exchanged */
    size_t min_bytes;
    size_t piece;            /* BRAID_P2P_CMA_PIECE: bytes per process_vm_readv */
    uint64_t probe;          /* the word peers read in the probe */
    int help;                /* BRAID_P2P_CMA_HELP: a waiting sender copies pieces too */
    uint64_t pulls;          /* messages this rank received by CMA (tests) */
    _Atomic uint64_t pulled; /* bytes this rank read (tests read it from another thread) */
    _Atomic uint64_t pushed; /* bytes this rank wrote into its receivers' buffers */
    int ptracer;             /* holds a reference to PR_SET_PTRACER_ANY (p2p_cma.c) */
    uint64_t test_stall_ns;  /* braid_p2p_cma_test_stall */
    int test_leave_first;
    _Atomic int test_stalled;
} braid_p2p_cma_t;

/* At init, after the send/recv connections exist (send/recv: nranks entries, NULL for this
 * rank): prctl(PR_SET_PTRACER) where a peer shares the host (undone by the free of the
 * process's last such communicator), the probe exchange (two bootstrap allgathers, run by every
 * rank whatever its settings) and the per-peer decision. Sets *cma_p (freed with
 * braid_p2p_cma_free). */
braid_result_t braid_p2p_cma_connect(struct braid_comm *comm, braid_conn_t **send,
                                     braid_conn_t **recv, braid_p2p_cma_t **cma_p);
void braid_p2p_cma_free(braid_p2p_cma_t *cma);

/* Whether a send of op (bytes > 0) to peer over c goes by CMA. */
int braid_p2p_cma_use(const braid_p2p_cma_t *cma, const braid_conn_t *c, const braid_p2p_op_t *op,
                      size_t bytes);
/* Writes the descriptor of [src, src + bytes) into slot and posts it with header h (whose
 * bytes and flags it sets). */
braid_result_t braid_p2p_cma_post(braid_conn_t *c, void *slot, braid_msg_hdr_t *h, const void *src,
                                  size_t bytes);
/* The descriptor of a BRAID_MSG_CMA message from peer (buf: its payload): its byte count in
 * *bytes_p, or BRAID_ERR_INTERNAL if malformed. */
braid_result_t braid_p2p_cma_desc(const braid_p2p_cma_t *cma, int peer, const braid_msg_hdr_t *h,
                                  const void *buf, uint64_t *bytes_p);
/* The receiving end of that message (buf: its payload, total bytes as checked) into dst: the
 * first call publishes dst; each call copies the next unclaimed piece, if any, else waits for
 * the pieces the sender is copying (spin, then yield; comm's abort and timeout apply), checks
 * the sender over c (peer_check) and sets *off_p = total. *off_p stays below total until then.
 * BRAID_ERR_REMOTE naming the rank when the sender died or its memory cannot be read. */
braid_result_t braid_p2p_cma_pull(struct braid_comm *comm, braid_conn_t *c, void *buf, char *dst,
                                  size_t total, size_t *off_p);
/* A receive that fails (abort, timeout, an error elsewhere in its batch) with buf's message
 * unfinished: no piece can be claimed after this, and it waits for the pieces the sender is
 * writing, so that no write reaches the buffer once the call has returned: until they are
 * finished (written or failed) or the sender's process has ended, not just failed. A sender
 * still writing after comm's timeout (a second once comm is aborted) is named in a warning. */
void braid_p2p_cma_revoke(struct braid_comm *comm, braid_conn_t *c, void *buf);
/* The sending end, while it waits for the release of the descriptor it posted in slot for
 * src: copies the next unclaimed piece into the receiver's buffer once the receiver has
 * published it, when allowed (cma->help and this rank's probe read that peer), and only while
 * the receiver's process lives (its connection's pidfd: its pid may have been reused);
 * *moved = 1 if it copied. BRAID_ERR_REMOTE naming the rank when the receiver's memory cannot
 * be written (the piece then counts as done, with BRAID_CMA_DONE_FAILED). */
braid_result_t braid_p2p_cma_push(braid_p2p_cma_t *cma, braid_conn_t *c, void *slot,
                                  const char *src, int *moved);

#endif
