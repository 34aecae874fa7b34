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

/* BRAID_P2P_CMA=auto measures which path is faster per connection (braid_p2p_cma_pick): the
 * single copy won by 1.2-1.3x at 16-64 MiB on some days of the 2-vCPU VMs (sessions 13-21) and
 * lost by 1.4-1.6x at 1-64 MiB on others (session 35), where the kernel's page-by-page copy
 * ran at about 5 GB/s and the pipelined slots at 8. */
/* Messages that alternate until both paths are measured. */
#define BRAID_CMA_PICK_TRIAL 8
/* Then one message in at least BRAID_CMA_PICK_EXPLORE takes the other path, in more where
 * that would cost more than BRAID_CMA_PICK_BUDGET of the time, in at most
 * BRAID_CMA_PICK_EXPLORE_MAX, and at most BRAID_CMA_PICK_EXPLORE_EARLY while either path has
 * fewer than BRAID_CMA_PICK_SETTLE messages. */
#define BRAID_CMA_PICK_EXPLORE 32
#define BRAID_CMA_PICK_BUDGET 0.02
#define BRAID_CMA_PICK_EXPLORE_MAX 4096
#define BRAID_CMA_PICK_EXPLORE_EARLY 256
#define BRAID_CMA_PICK_SETTLE 8
/* A path's figure starts as the least of its first this many counted samples. */
#define BRAID_CMA_PICK_SEED 3

typedef struct braid_p2p_cma {
    uint8_t *send_ok; /* per peer: sends of >= min_bytes to it may go by CMA */
    int measured;     /* BRAID_P2P_CMA=auto: braid_p2p_cma_pick chooses (1: always CMA) */
    uint64_t *picked; /* per peer: sends of >= min_bytes whose path was chosen */
    double *rx_avg;   /* per peer x path: receives' copy time, moving average, ns per byte */
    uint32_t *rx_n;   /* per peer x path: receives timed (the first of each is not counted) */
    double *tx_avg;   /* per peer x path: sends' copy time (slots: in; CMA: helping) */
    uint32_t *tx_n;   /* per peer x path: sends timed (the first of each is not counted) */
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
    double test_scale[2];    /* braid_p2p_cma_test_scale */
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

/* Whether a send of op (bytes > 0) to peer over c goes by CMA: decided once per operation
 * (op->cma_pick), by braid_p2p_cma_pick where cma->measured. */
int braid_p2p_cma_use(braid_p2p_cma_t *cma, const braid_conn_t *c, braid_p2p_op_t *op,
                      size_t bytes);
/* The path of a connection's sent-th message of at least BRAID_P2P_CMA_MIN bytes (1 single
 * copy, 0 the slots), from the receiver's costs per path (ps per byte, 0: not measured yet):
 * the two alternate (single copy first) until both are measured, for at most
 * BRAID_CMA_PICK_TRIAL messages; then the cheaper one (single copy on a tie), and the other for
 * one message in BRAID_CMA_PICK_EXPLORE, or in as many as keep that message's extra time at
 * BRAID_CMA_PICK_BUDGET of the total (at most BRAID_CMA_PICK_EXPLORE_MAX; at most
 * BRAID_CMA_PICK_EXPLORE_EARLY while the sender has sent fewer than BRAID_CMA_PICK_SETTLE
 * messages of either path: `samples`), so that a change of the machine's speeds, or a first
 * figure that was too high, is seen.
 * After the trial with one path measured, that one; with none, the single copy. */
int braid_p2p_cma_pick(uint64_t sent, uint64_t cost_slots, uint64_t cost_cma, uint32_t samples);
/* The receiving end: copying a message of bytes from peer over c (shm) out of the slots
 * (cma_path 0) or reading it (1) took ns; folds it into the path's figure (not the first of
 * each path: cold pages; the least of the next BRAID_CMA_PICK_SEED, then a moving average of
 * clipped samples) and publishes that to the sender (braid_shm_msg_cost_set). */
void braid_p2p_cma_rx_done(braid_p2p_cma_t *cma, braid_conn_t *c, int peer, int cma_path,
                           size_t bytes, uint64_t ns);
/* The sending end of a message to peer over c whose path braid_p2p_cma_pick chose: its copies
 * into the slots (cma_path 0) or its help (1: 0 ns when it wrote nothing) took ns; folded
 * likewise (samples clipped at 4x the larger of its figure and the receiver's for the path). */
void braid_p2p_cma_tx_done(braid_p2p_cma_t *cma, const braid_conn_t *c, int peer, int cma_path,
                           size_t bytes, uint64_t ns);
/* Per path ([0] slots, [1] single copy): both ends' copy time in ps per byte, 0 while either
 * end has no figure yet (the input of braid_p2p_cma_pick). */
void braid_p2p_cma_costs(const braid_p2p_cma_t *cma, const braid_conn_t *c, int peer,
                         uint64_t cost[2]);
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
 * BRAID_ERR_REMOTE naming the rank when the sender died or its memory cannot be read.
 * copy_ns (may be NULL): adds the time spent in process_vm_readv (not the waits). */
braid_result_t braid_p2p_cma_pull(struct braid_comm *comm, braid_conn_t *c, void *buf, char *dst,
                                  size_t total, size_t *off_p, uint64_t *copy_ns);
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
