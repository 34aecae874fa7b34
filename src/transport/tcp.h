/* TCP transport: internal state shared by tcp.c and tcp_rx.c (data path), tcp_conn.c (setup,
 * listener, progress thread) and tcp_wire.c (wire formats), and the wire parsers the fuzzer drives.
 *
 * Design (see tcp.c and tcp_rx.c for the data path, tcp_conn.c for setup):
 * - Every connection has a local FIFO of nslots slots, like shm's: the engine writes a send
 *   slot in place and posts it; a receive slot is filled from the socket and read in place.
 * - Frames: a 32-byte wire header (magic, bytes, seq, coll, dtype, op, flags, root, code,
 *   count) followed by `bytes` of payload. Frame k of a connection travels on socket
 *   k % nsocks (BRAID_NSOCKS_PERPEER sockets per connection), so every socket carries whole
 *   frames in order and the receiver reads frame k from socket k % nsocks.
 * - Sending: send_post writes straight to the socket from the engine's thread when the
 *   socket has room (no thread hand-off at small sizes). What does not fit stays queued in the
 *   slot and the socket is armed for EPOLLOUT in the per-communicator progress thread, which
 *   finishes it even while the engine waits on something else or runs no collective at all.
 *   A slot is free again once its frame is entirely in the kernel. In ring plans the engine
 *   posts frames whose payload already sits in the user's buffers with send_post_ref: the
 *   frame then points there (wsrc) and the kernel copies from there, one copy fewer; before
 *   the collective returns, send_detach copies what is still queued into the frames' slots.
 * - Receiving: only the engine's thread reads data sockets, on demand (recv_get / wait), so
 *   a receive costs no thread hand-off; wait() sleeps in ppoll on the socket. Point-to-point
 *   receives (core/p2p.c) and the ring's copy steps (recv, recvCopySend in core/engine.c)
 *   take the payload straight into the caller's buffer (recv_peek reads the header, recv_into
 *   the payload): the kernel copies once, into the user's memory. Such a connection reads no
 *   frame ahead of the one asked for (direct_seen): the next may be for the user's buffer.
 * - Failures travel as ABORT frames: forward on a send socket (after the frames already
 *   posted), and backward on a receive socket (the sender never gets other data there; its
 *   progress thread watches for it and for EOF).
 * - The progress thread also owns the listener: it accepts, reads the hello {magic, version,
 *   rank, channel, socket index, nsocks, nonce, MAC}, finds the receive connection those fields
 *   name whose MAC checks (braid_tcp_hello_mac: keyed by the job secret, over the receive
 *   connection's own nonce from its info blob, the receiver's rank and the hello; the secret
 *   never goes on the wire) and hands it the socket; anything else is closed and logged. */
#ifndef BRAID_TRANSPORT_TCP_H
#define BRAID_TRANSPORT_TCP_H

#include "core/bootstrap.h"
#include "transport/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

extern const braid_transport_t braid_transport_tcp;

/* ---- wire formats (tcp_wire.c) ------------------------------------------------------------ */
#define BRAID_TCP_HDR_BYTES 32
#define BRAID_TCP_HELLO_BYTES 72
#define BRAID_TCP_HELLO_MACED 40 /* the hello bytes its MAC covers (all but the MAC) */
#define BRAID_TCP_INFO_BYTES 56
#define BRAID_TCP_ABORT_MAX 1000 /* payload bytes of an ABORT frame (error text) */
/* The result code of the ABORT frame a clean braid_comm_destroy sends on each connection
 * (after the data): the peer reports "rank R ... destroyed its communicator", not a closed
 * connection. Not a braid_result_t. */
#define BRAID_TCP_GOODBYE (-100)
#define BRAID_TCP_MAX_SOCKS 8
/* Receive bounce buffer per socket (headers, small payloads). A read into it asks for
 * BRAID_TCP_READAHEAD bytes, or for a whole frame of up to BRAID_TCP_BOUNCE bytes where the
 * socket's last frame was that size (one system call per frame instead of two: tcp_rx.c). */
#define BRAID_TCP_READAHEAD 8192
#define BRAID_TCP_BOUNCE (32768 + BRAID_TCP_HDR_BYTES)

/* Packs a data frame header (code 0) or an ABORT frame header (hdr->flags has
 * BRAID_MSG_ABORT, code < 0 is the sender's braid_result_t). */
void braid_tcp_hdr_pack(const braid_msg_hdr_t *hdr, int32_t code, uint8_t out[BRAID_TCP_HDR_BYTES]);
/* Parses and length-checks a frame header: a data frame may carry at most slot_size bytes,
 * an ABORT frame at most BRAID_TCP_ABORT_MAX. BRAID_ERR_REMOTE with the reason otherwise. */
braid_result_t braid_tcp_hdr_parse(const void *buf, size_t len, size_t slot_size,
                                   braid_msg_hdr_t *hdr_p, int32_t *code_p);

/* What a connecting rank presents on each data socket. */
typedef struct {
    int32_t rank, channel, sock, nsocks;
    uint8_t nonce[BRAID_NONCE_BYTES]; /* the connector's, fresh for each socket */
    uint8_t mac[BRAID_SHA256_BYTES];  /* braid_tcp_hello_mac */
} braid_tcp_hello_t;
void braid_tcp_hello_pack(const braid_tcp_hello_t *h, uint8_t out[BRAID_TCP_HELLO_BYTES]);
/* BRAID_ERR_AUTH for a bad magic or version, BRAID_ERR_INVALID_ARG for bad fields. The
 * MAC is not checked here. */
braid_result_t braid_tcp_hello_parse(const void *buf, size_t len, braid_tcp_hello_t *h_p);
/* The hello's proof that its sender knows the job secret: HMAC(secret, "braid-tcp-hello" |
 * conn_nonce | u32 to_rank | hello[0, BRAID_TCP_HELLO_MACED)), where conn_nonce is the one in
 * the receive connection's info blob (drawn at its recv_setup) and to_rank the receiver's rank.
 * Replays: a hello is valid only for the one receive connection whose nonce it covers, and
 * that connection takes each socket index once, from the first valid hello; a recorded hello
 * is refused anywhere else (another connection, communicator or job with the same secret).
 * The listener sends nothing back, so it proves nothing to the connector: the connector
 * reaches it at the address the authenticated bootstrap allgather gave, which the listener
 * holds bound for the communicator's life. */
void braid_tcp_hello_mac(const uint8_t secret[BRAID_SECRET_BYTES],
                         const uint8_t conn_nonce[BRAID_NONCE_BYTES], int32_t to_rank,
                         const uint8_t hello[BRAID_TCP_HELLO_MACED],
                         uint8_t out[BRAID_SHA256_BYTES]);

/* The receiver's connection info blob (allgathered by the bootstrap). */
typedef struct {
    struct sockaddr_storage addr; /* listener address and port */
    socklen_t addrlen;
    uint32_t nsocks;
    uint64_t slot_size;
    uint8_t nonce[BRAID_NONCE_BYTES]; /* the receive connection's (braid_tcp_hello_mac) */
} braid_tcp_info_t;
void braid_tcp_info_pack(const braid_tcp_info_t *info, uint8_t out[BRAID_TCP_INFO_BYTES]);
braid_result_t braid_tcp_info_parse(const void *buf, size_t len, braid_tcp_info_t *info_p);

/* ---- internal state ----------------------------------------------------------------------- */
enum { TCP_EV_LISTEN = 1, TCP_EV_EFD, TCP_EV_HELLO, TCP_EV_SEND };

struct tcp_conn;
struct tcp_state;

typedef struct {
    int kind; /* TCP_EV_SEND: first member, the epoll tag */
    struct tcp_conn *conn;
    int fd, idx;
    /* Sender: next frame index this socket writes, bytes of it written, EPOLLOUT armed. */
    uint32_t next;
    size_t off;
    int armed, in_epoll;
    /* Receiver: bounce buffer for headers and small payloads, the frame being read. */
    uint8_t *bb;
    size_t bb_off, bb_len, bb_want; /* bb_want: bytes a read into bb asks for (0: readahead) */
    int have_hdr;
    braid_msg_hdr_t hdr;
    int32_t code;
    size_t got;
    /* Sender: bytes of an ABORT frame the receiver sent back. */
    uint8_t rev[BRAID_TCP_HDR_BYTES + BRAID_TCP_ABORT_MAX];
    size_t rev_len;
} tcp_sock_t;

typedef struct tcp_conn {
    braid_conn_t base;
    struct tcp_state *st;
    struct tcp_conn *next_conn; /* every connection of the communicator */
    int nsocks;
    tcp_sock_t sock[BRAID_TCP_MAX_SOCKS];
    char desc[160];                   /* "rank 3 (host h, 1.2.3.4:5)" */
    uint8_t nonce[BRAID_NONCE_BYTES]; /* receiver: in its info blob; hellos' MACs cover it */

    uint32_t nslots;
    char *slots; /* nslots * slot_size */
    /* Sender: head = frames posted (engine), tail = frames entirely in the kernel. The mutex
     * guards the sockets' write state; ev counts events a waiter sleeps on (tail moved,
     * failure) with futex, waiters says someone sleeps. */
    _Atomic uint32_t head, tail;
    _Atomic uint32_t ev, waiters;
    uint32_t pos;       /* engine: next slot to post (send) or to read (recv) */
    uint32_t tail_seen; /* sender's cached tail */
    pthread_mutex_t mu;
    uint8_t (*whdr)[BRAID_TCP_HDR_BYTES]; /* sender: packed header of each slot */
    uint32_t *wbytes;                     /* sender: payload bytes of each slot */
    const char **wsrc; /* sender: where each slot's payload is (the slot, or send_post_ref's) */
    /* Sender after fail(): an ABORT frame sent as frame abort_idx, nothing after it. */
    int abort_set, abort_done;
    uint32_t abort_idx;
    uint8_t abort_frame[BRAID_TCP_HDR_BYTES + BRAID_TCP_ABORT_MAX];
    size_t abort_len;
    /* Receiver: headers of filled slots; frames received (rhead). */
    braid_msg_hdr_t *rhdr;
    uint32_t rhead;
    char rx_text[BRAID_TCP_ABORT_MAX + 1]; /* receiver: text of an ABORT frame */
    /* Receiver, direct receives (recv_peek / recv_into): direct says the consumer takes
     * payloads into its own buffers (only headers are read ahead); rx_user is the buffer
     * frame pos is being read into (NULL = none). */
    int direct;
    int direct_seen; /* recv_peek was used: the pump reads no frame ahead of the one asked for */
    char *rx_user;
    /* Payload bytes of completed direct receives: read from the socket straight into the
     * caller's buffer, or copied there from a slot (the frame had been read ahead). */
    uint64_t rx_direct_bytes, rx_copied_bytes;
    _Atomic int nconnected; /* receiver: sockets the progress thread handed over */
    /* Sticky failure seen on this connection (peer closed, peer's ABORT, protocol error). */
    _Atomic int failed;
    _Atomic int peer_failed; /* the code of the peer's ABORT frame (not a goodbye), else 0 */
    char fail_msg[BRAID_TCP_ABORT_MAX + 200];
    int closed;
} tcp_conn_t;

typedef struct tcp_pending {
    int kind; /* TCP_EV_HELLO */
    struct tcp_pending *next;
    int fd;
    uint8_t buf[BRAID_TCP_HELLO_BYTES];
    size_t got;
    uint64_t since_ns, deadline_ns; /* accepted at, dropped at (no hello) */
    char from[64];
} tcp_pending_t;

typedef struct tcp_state {
    struct braid_comm *comm;
    int ep;        /* the progress thread's epoll */
    int efd;       /* wakes the progress thread (stop) */
    int wake_efd;  /* wakes the engine sleeping in ppoll (wake/fail) */
    int listen_fd; /* -1 until the first recv_setup */
    struct sockaddr_storage laddr;
    socklen_t laddrlen;
    int nsocks;              /* BRAID_NSOCKS_PERPEER */
    int tag_listen, tag_efd; /* epoll tags */
    pthread_t thread;
    int thread_started;
    _Atomic int stop;
    pthread_mutex_t tlock; /* held by the progress thread while it handles events */
    tcp_conn_t *conns;
    tcp_pending_t *pending; /* newest first */
    int npending;
    int pending_cap; /* at most this many wait for a hello; the listener pauses meanwhile */
    int listen_on;   /* the listener is watched for connections */
    /* Connections closed to make room since the last warning (at most one per 10 s), and when
     * that was. */
    int crowd_dropped;
    uint64_t crowd_warned_ns;
    uint64_t accept_paused_until; /* after EMFILE and the like (0 = accepting) */
    /* errno of the listener's failing accept (0 = none) and since when (braid_now_ns): a
     * receive connection still waiting for its sockets reports it (braid_tcp_recv_accept). */
    _Atomic int accept_err;
    _Atomic uint64_t accept_err_since;
    /* While the communicator is destroyed: when its connections stop flushing (0 = unset). */
    _Atomic uint64_t flush_deadline;
} tcp_state_t;

/* tcp_conn.c */
braid_result_t braid_tcp_state_get(struct braid_comm *comm, tcp_state_t **st_p);
braid_result_t braid_tcp_listen(tcp_state_t *st);
void braid_tcp_conn_describe(tcp_conn_t *c, const struct sockaddr_storage *addr);
void braid_tcp_sock_options(int fd);

static inline char *braid_tcp_slot(tcp_conn_t *c, uint32_t frame)
{
    return c->slots + (size_t)(frame % c->nslots) * c->base.slot_size;
}
/* tcp.c: the connection's sticky failure as this thread's error, or BRAID_SUCCESS; a peer's
 * ABORT frame (code, text): its failure, or its goodbye (a clean destroy). */
braid_result_t braid_tcp_failure(tcp_conn_t *c);
void braid_tcp_peer_aborted(tcp_conn_t *c, int32_t code, const char *text);

/* tcp_rx.c: the receiving side (the transport table's entries, and the pump the waits use:
 * reads what the socket has into free slots or the direct receive's buffer). */
braid_result_t braid_tcp_rx_pump(tcp_conn_t *c);
braid_result_t braid_tcp_recv_get(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p,
                                  const void **buf_p);
braid_result_t braid_tcp_recv_release(braid_conn_t *conn);
braid_result_t braid_tcp_recv_peek(braid_conn_t *conn, const braid_msg_hdr_t **hdr_p);
braid_result_t braid_tcp_recv_into(braid_conn_t *conn, void *dst);
void braid_tcp_recv_undirect(braid_conn_t *conn);

/* tcp.c, used by the progress thread (both with c->mu held). */
void braid_tcp_tx_push(tcp_conn_t *c);
void braid_tcp_rev_read(tcp_sock_t *s);
/* Records the connection's first failure and wakes its waiters. */
void braid_tcp_set_failed(tcp_conn_t *c, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void braid_tcp_sock_unwatch(tcp_sock_t *s);

/* For tests: payload bytes that direct receives (recv_into) on the communicator's ring
 * connections took straight from the socket (*direct_p) and copied from a slot (*copied_p),
 * summed over the channels, since the communicator was created. */
void braid_tcp_ring_rx_bytes(struct braid_comm *comm, uint64_t *direct_p, uint64_t *copied_p);

/* For tests: the address and port the communicator's data listener is bound to
 * (BRAID_ERR_INVALID_USAGE if it has none). */
braid_result_t braid_tcp_listen_addr(struct braid_comm *comm, struct sockaddr_storage *addr_p,
                                     socklen_t *len_p);

#endif
