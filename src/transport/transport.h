/* The transport interface: one-directional connections carrying a FIFO of fixed-size staging
 * slots from a sender rank to a receiver rank.
 *
 * A connection is set up in three calls, with a bootstrap allgather between the first two:
 *   receiver: recv_setup(peer, channel) -> conn + an info blob (<= BRAID_CONN_INFO_BYTES)
 *   sender:   send_connect(peer, channel, receiver's blob) -> conn
 *   receiver: recv_accept(conn) completes once the sender is connected.
 *
 * The data path is non-blocking and copy-avoiding: the sender asks for the next free slot
 * (send_get), writes the payload straight into it (the engine's reduction writes there), then
 * posts it with a message header (send_post); or, where the transport offers send_post_ref
 * and the payload already sits in the caller's buffers, posts the slot with a pointer there. The
 * receiver asks for the next filled slot (recv_get), reads it in place, and releases it
 * (recv_release). A slot that is not available yet is BRAID_INPROGRESS (back-pressure), never an
 * error. wait() sleeps until the condition the engine needs may have changed, or until deadline_ns,
 * whichever is first; it also detects a dead peer (BRAID_ERR_REMOTE naming it).
 *
 * Ops tables start with their size so they can grow; fields use designated initializers. */
#ifndef BRAID_TRANSPORT_TRANSPORT_H
#define BRAID_TRANSPORT_TRANSPORT_H

#include "braid/braid.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define BRAID_CONN_INFO_BYTES 192
/* Room for a failure's text that a transport hands to the peer (fail()). */
#define BRAID_FAIL_TEXT 1024

struct braid_comm;

/* Carried with every message (every slot). seq and desc let the receiver check that both
 * ranks run the same collective (BRAID_ERR_MISMATCH otherwise). */
typedef struct {
    uint32_t bytes; /* payload bytes in this slot */
    uint32_t seq;   /* collective sequence number on the communicator (low 32 bits) */
    uint8_t coll;   /* braid_coll_t */
    uint8_t dtype;  /* braid_datatype_t */
    uint8_t op;     /* braid_redop_t */
    uint8_t flags;  /* BRAID_MSG_* */
    int32_t root;   /* root rank or -1 */
    uint64_t count; /* the collective's count argument (a fused run's: core/engine.h) */
} braid_msg_hdr_t;

#define BRAID_MSG_ABORT 0x1 /* the sender aborted: the payload is an error text */
/* A header-only message carrying the sender's call (core/engine.c: the descriptor exchange of
 * rooted and count-0 collectives); with REJECTED the sender refused the call (bad arguments)
 * and the payload is its reason. */
#define BRAID_MSG_HELLO 0x2
#define BRAID_MSG_REJECTED 0x4
/* A header-only message on the send/recv connections (core/p2p.c): the sender is blocked in
 * receive #seq from the receiver, having started `root` collectives; receivers skip it. */
#define BRAID_MSG_NOTICE 0x8
/* A header-only message on the send/recv connections (core/p2p_cma.c): the payload is a
 * braid_cma_desc_t naming the sender's buffer, which the receiver reads with
 * process_vm_readv (and the sender writes into the receiver's with process_vm_writev) before
 * the receiver releases the slot; both ends update the descriptor's shared fields in the slot
 * (only over shm, whose slots both ends map read-write). */
#define BRAID_MSG_CMA 0x10
/* On a shm send slot's message (core/p2p.c): the sender wrote the payload with streaming
 * stores (core/ntpick.h); the receiver times its copy out per kind and reports it back. */
#define BRAID_MSG_NT 0x20
/* On every chunk (or the CMA descriptor) of a send/recv message whose path the sender chose by
 * measurement (core/p2p_cma.h, braid_p2p_cma_pick; shm only): the receiver times its copies
 * out (or its reads) and reports them back. */
#define BRAID_MSG_PICKED 0x40

/* BRAID_WAIT_RELEASED (only on transports with send_released): until every slot posted on a
 * send connection has been released by the receiver. */
typedef enum { BRAID_WAIT_SEND = 0, BRAID_WAIT_RECV = 1, BRAID_WAIT_RELEASED = 2 } braid_wait_dir_t;

typedef struct braid_conn {
    const struct braid_transport *ops;
    struct braid_comm *comm;
    int peer; /* the remote rank */
    int channel;
    size_t slot_size; /* payload capacity of one slot */
    int is_send;
} braid_conn_t;

typedef struct braid_transport {
    size_t size; /* sizeof(braid_transport_t) of the build that filled the table */
    const char *name;
    braid_result_t (*recv_setup)(struct braid_comm *comm, int peer, int channel,
                                 braid_conn_t **conn_p, void *info, size_t *info_len_p);
    braid_result_t (*send_connect)(struct braid_comm *comm, int peer, int channel, const void *info,
                                   size_t info_len, braid_conn_t **conn_p);
    braid_result_t (*recv_accept)(braid_conn_t *conn);
    /* Data path. */
    braid_result_t (*send_get)(braid_conn_t *conn, void **buf_p);
    braid_result_t (*send_post)(braid_conn_t *conn, const braid_msg_hdr_t *hdr);
    braid_result_t (*recv_get)(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                               const void **buf_p);
    braid_result_t (*recv_release)(braid_conn_t *conn);
    /* Progress for transports that move data in software (tcp); NULL when not needed. */
    braid_result_t (*progress)(braid_conn_t *conn);
    /* Sleeps until the slot in direction dir may be available, or deadline_ns (CLOCK_MONOTONIC)
     * passes (returns BRAID_SUCCESS either way), or the peer is found dead (BRAID_ERR_REMOTE). */
    braid_result_t (*wait)(braid_conn_t *conn, braid_wait_dir_t dir, uint64_t deadline_ns);
    /* Wakes any thread sleeping in wait() on conn (used by abort). Async-safe. */
    void (*wake)(braid_conn_t *conn);
    /* Tells the peer this side failed (best effort): its waits then return BRAID_ERR_REMOTE
     * with `why`, or `code` itself when it is BRAID_ERR_MISMATCH. */
    void (*fail)(braid_conn_t *conn, braid_result_t code, const char *why);
    void (*close)(braid_conn_t *conn);
    /* Frees per-communicator state of this transport (listeners, threads); called by
     * braid_comm_destroy after every connection is closed. NULL when there is none. */
    void (*comm_cleanup)(struct braid_comm *comm);
    /* Optional pair (both or neither; NULL when not supported). send_post_ref posts the slot
     * from send_get like send_post, but the payload is read from src instead of the slot,
     * which the engine then leaves unwritten: a copy saved. src must stay valid and unchanged
     * until the frame has gone or send_detach has run; send_detach copies whatever posted
     * frames still refer to caller memory into their own slots, so the caller may reuse that
     * memory at once. */
    braid_result_t (*send_post_ref)(braid_conn_t *conn, const braid_msg_hdr_t *hdr,
                                    const void *src);
    void (*send_detach)(braid_conn_t *conn);
    /* The user registered [buf, buf + bytes) with braid_comm_register (bytes > 0; valid until
     * the matching mem_deregister). NULL when the transport needs no registration. */
    braid_result_t (*mem_register)(struct braid_comm *comm, void *buf, size_t bytes);
    void (*mem_deregister)(struct braid_comm *comm, void *buf, size_t bytes);
    /* Zero-copy, optional (NULL: not supported). recv_expose: this receiver's output buffer of
     * collective seq is [base, base + bytes) (NULL withdraws; the transport may ignore it, e.g.
     * when the buffer is not registered). send_post_at: as send_post, where the receiver
     * exposed its output for hdr->seq the payload may go straight to it at dst_off; its
     * recv_get then returns a pointer into that buffer. */
    void (*recv_expose)(braid_conn_t *conn, uint32_t seq, void *base, size_t bytes);
    braid_result_t (*send_post_at)(braid_conn_t *conn, const braid_msg_hdr_t *hdr, size_t dst_off);
    /* Optional (NULL where exposures are withdrawn locally for good): the collective that
     * exposed conn's output failed with `code`; before the withdrawal, make sure no write of
     * the peer can reach the output any more, telling the peer as fail() would (the
     * communicator is failed anyway). */
    void (*recv_revoke)(braid_conn_t *conn, braid_result_t code, const char *why);
    /* Direct receives, optional (all three or none; NULL: not supported). recv_peek: the
     * header of the next message as soon as it has arrived, before its payload has
     * (BRAID_INPROGRESS until then; failures as recv_get). A message it returns with a
     * payload and no flags may then be taken with recv_into: its payload goes to dst (room
     * for hdr->bytes), BRAID_INPROGRESS while part of it is still to come (call again with
     * the same dst; wait(RECV) returns when it may be complete), BRAID_SUCCESS once all of
     * it is in dst: the message is then consumed (no recv_release). Other messages (empty,
     * flagged) are taken with recv_get as usual, which also ends direct mode. Until
     * recv_into completes, the transport may write dst; recv_undirect moves what arrived
     * back into the transport's slot and stops that (call it before giving dst up). */
    braid_result_t (*recv_peek)(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p);
    braid_result_t (*recv_into)(braid_conn_t *conn, void *dst);
    void (*recv_undirect)(braid_conn_t *conn);
    /* Optional (NULL: a posted message is with the receiver at once, as with shm): how many
     * posted messages this side still holds (not yet handed to the network; 0 too once the
     * connection failed), after moving data where it can without blocking. With 0, a
     * send_post_ref loan is over (send_detach would copy nothing). */
    uint32_t (*send_inflight)(braid_conn_t *conn);
    /* Optional (NULL: not supported): a descriptor whose readiness (pfd->events) may make the
     * slot in direction dir available, so that a runner blocked on several connections polls
     * them all at once (and then moves the data itself) instead of sleeping in one wait() at a
     * time. 1 when it filled pfd, 0 when it has none now (use wait()). */
    int (*wait_fd)(braid_conn_t *conn, braid_wait_dir_t dir, struct pollfd *pfd);
    /* Optional pair for single-copy messages between processes of one host (core/p2p_cma.c;
     * NULL where the sender cannot see the receiver's releases). send_released: BRAID_SUCCESS
     * once the receiver has released every slot posted on this send connection, else
     * BRAID_INPROGRESS (wait with BRAID_WAIT_RELEASED). peer_check: BRAID_ERR_REMOTE (or the
     * peer's BRAID_ERR_MISMATCH) when the peer has failed this connection or died, checked
     * now (ordered after this thread's earlier reads of the peer's memory). peer_ended: 1
     * once the peer's process has ended (a zombie too), else 0, whatever the connection's
     * failure flags say; never blocks (shm: its pidfd, so a reused pid is no live peer). */
    braid_result_t (*send_released)(braid_conn_t *conn);
    braid_result_t (*peer_check)(braid_conn_t *conn);
    int (*peer_ended)(braid_conn_t *conn);
    /* Optional (NULL: not supported): the peer's failure notice on conn, when the peer failed
     * its end with fail() (its communicator failed: BRAID_ERR_REMOTE with its reason, or its
     * BRAID_ERR_MISMATCH), else BRAID_SUCCESS. Not reported here: a closed connection, a dead
     * peer, and a peer's own abort or timeout (BRAID_ERR_ABORTED, BRAID_ERR_TIMEOUT: every
     * rank waiting on it finds those itself, in its wait or at its own timeout). Reads only
     * what this side has already received (tcp: the frames its reads have taken). */
    braid_result_t (*peer_failed)(braid_conn_t *conn);
} braid_transport_t;

extern const braid_transport_t braid_transport_shm;
/* The receiver's cost of copying a message out of a shm connection's slots, per kind of
 * stores the sender wrote it with (0 plain, 1 streaming), in picoseconds per byte (0: not
 * measured), kept in the connection's shared control block on a line of its own: set by the
 * receiving end, read by the sending end (core/ntpick.h). */
void braid_shm_rx_cost_set(braid_conn_t *recv_conn, int nt, uint64_t ps_per_byte);
uint64_t braid_shm_rx_cost_get(const braid_conn_t *send_conn, int nt);
/* The receiver's copy time for the messages whose path the sender picks (core/p2p_cma.h,
 * braid_p2p_cma_pick), per path (0 its copies out of the slots, 1 its process_vm_readv calls),
 * as a moving average in picoseconds per byte of the message (0: not measured), on the same
 * line: set by the receiving end, read by the sending end. */
void braid_shm_msg_cost_set(braid_conn_t *recv_conn, int cma, uint64_t ps_per_byte);
uint64_t braid_shm_msg_cost_get(const braid_conn_t *send_conn, int cma);
/* A new name for a shared-memory segment in /dev/shm: "/braid-ns<PID namespace inode>-<pid>-"
 * tag, a counter, "-" and 8 random hex digits (at most 52 bytes with the NUL for a tag of up to
 * 2 characters). The shm transport's setup removes segments of dead creators of its own PID
 * namespace only (shm.c). */
void braid_shm_segment_name(char *out, size_t len, const char *tag);

/* Whether process pid has ended (a zombie too): pidfd's readiness where pidfd >= 0 (immune to
 * pid reuse), else kill(pid, 0) and /proc/<pid>/stat; 0 for pid <= 0. Never blocks (shm.c). */
int braid_shm_pid_ended(int pid, int pidfd);

/* The built-in transport called name ("shm", "tcp"), or NULL if not built (registry.c). */
const braid_transport_t *braid_transport_by_name(const char *name);
/* Calls every built-in transport's comm_cleanup. */
void braid_transport_comm_cleanup(struct braid_comm *comm);
/* Calls every built-in transport's mem_register (undone on failure) / mem_deregister. */
braid_result_t braid_transport_mem_register(struct braid_comm *comm, void *buf, size_t bytes);
void braid_transport_mem_deregister(struct braid_comm *comm, void *buf, size_t bytes);

/* Monotonic clock in nanoseconds. */
uint64_t braid_now_ns(void);

#endif
