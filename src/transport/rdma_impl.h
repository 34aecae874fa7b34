/* RDMA verbs transport: state shared by rdma.c (data path), rdma_conn.c (setup, the rdma_cm
 * thread, close) and rdma_dev.c (device and address choice: BRAID_IB_HCA, BRAID_IB_GID_INDEX). */
#ifndef BRAID_TRANSPORT_RDMA_IMPL_H
#define BRAID_TRANSPORT_RDMA_IMPL_H

#include "core/bootstrap.h"
#include "transport/rdma.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RDMA_MAGIC 0x62524d41u /* "bRMA" */
#define RDMA_VERSION 3u        /* 3: MACs instead of the job secret in the handshake */
#define RDMA_HDR 64u           /* header bytes in front of every slot's payload */
#define RDMA_CTRL 0x80000000u  /* immediate: a failure code, not a sequence number */
#define RDMA_SEQ_MASK 0x7fffffffu
#define RDMA_INFO_BYTES 72
#define RDMA_EXTRA_WR 8
#define RDMA_INLINE_WANT 256
#define RDMA_TEXT 256           /* bytes a receive WR may land (a fail() text, an exposure) */
#define RDMA_CTRL_EXPOSE 0x100u /* with RDMA_CTRL: the payload is an rdma_expose_t */
#define RDMA_MAX_QPS 8          /* BRAID_IB_QPS_PER_CONN at most */
/* Exposures a receiver may have sent that its sender has not yet reported polled: each takes
 * one of the sender's QP 0 receive WRs until the sender polls its completion queue, which a
 * sender with nothing to send may not do for a long time (its receive queue holds the credits
 * of a FIFO-full, these, and a fail() notice). */
#define RDMA_MAX_EXPOSED 4
/* Work request ids: the kind in the low byte, the QP index above it, then (receives) the index
 * of the WR's own landing buffer. */
enum {
    RDMA_WR_RECV = 0,
    RDMA_WR_WRITE = 1,
    RDMA_WR_CREDIT = 2,
    RDMA_WR_FAIL = 3,
    RDMA_WR_EXPOSE = 4,
    RDMA_WR_ZC = 5 /* the payload part of a zero-copy message */
};
#define RDMA_WR_ID(kind, q) ((uint64_t)(kind) | ((uint64_t)(q) << 8))
#define RDMA_WR_RECV_ID(q, i) (RDMA_WR_ID(RDMA_WR_RECV, q) | ((uint64_t)(i) << 16))

/* Zero-copy (ring all-gather and broadcast into a braid_comm_register'ed output): at the start
 * of collective seq the receiver sends its sender this exposure of its output buffer. */
typedef struct {
    uint32_t seq, rkey;
    uint64_t addr, bytes;
} rdma_expose_t;
/* In a slot's header area after braid_msg_hdr_t: the payload went straight to the exposed
 * buffer at `off` (zc = 1) instead of following the header; exp_polled: the exposures the
 * sender had polled (their receive WRs reposted) when it posted the message. */
typedef struct {
    uint32_t zc, exp_polled;
    uint64_t off;
} rdma_zc_t;
#define RDMA_ZC_AT 32 /* offset of rdma_zc_t in the slot header */

struct rdma_state;

typedef struct rdma_conn {
    braid_conn_t base;
    struct rdma_state *st;
    struct rdma_conn *next; /* receive connections of the state */
    /* One rdma_cm id and RC QP per QP (BRAID_IB_QPS_PER_CONN): message pos goes on QP
     * pos % nqps; credits and fail() texts go on QP 0. */
    struct rdma_cm_id *ids[RDMA_MAX_QPS];
    int nqps;
    /* Receiver: drawn at recv_setup, in its info blob; sender: the receiver's, from that blob.
     * The handshake's MACs cover it (rdma_hello_t). */
    uint8_t nonce[BRAID_NONCE_BYTES];
    struct rdma_event_channel *ch; /* sender: its own channel (all its ids) */
    struct ibv_context *ctx;
    struct ibv_pd *pd; /* the state's shared one on its device, else own_pd */
    int own_pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *buf;               /* nslots slots, then the receive and send areas of fail() texts */
    char *rx_text, *tx_text; /* receive landing buffers (nqps x rq_depth), send text */
    char *tx_exp;            /* an rdma_expose_t being sent */
    size_t buf_len, stride;
    uint32_t nslots;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t pos;  /* next slot to post (send) or read (recv) */
    uint32_t tail; /* sender: slots released by the receiver (credits) */
    /* Receiver: per slot, 1 + the sequence number of the message that arrived in it (messages
     * on different QPs may complete out of order; they are read in order). */
    uint32_t *arrived;
    uint32_t rx_next[RDMA_MAX_QPS]; /* receiver: the sequence number expected next on QP q */
    /* Send WRs outstanding per QP: atomic, as braid_comm_abort's fail() (another thread) posts
     * its notice while the owning thread posts and polls (only the owner decrements). */
    _Atomic uint32_t sq_out[RDMA_MAX_QPS];
    uint32_t sq_max, rq_depth, max_inline;
    /* Zero-copy. Sender: the receiver's latest exposure. Receiver: what it exposed (held in
     * the registration cache until withdrawn). */
    rdma_expose_t exp;
    int exp_valid;
    struct braid_reg_entry *exp_entry;
    /* Receiver: exposures sent. Sender: exposures polled; receiver: the latest count of them
     * its sender reported (rdma_zc_t), at most RDMA_MAX_EXPOSED behind exp_sent. */
    uint32_t exp_sent, exp_polled;
    uint64_t zc_msgs;   /* messages sent (sender) / received (receiver) zero-copy */
    int path_mtu;       /* bytes, QP 0's path MTU (0 until connected) */
    unsigned cq_events; /* unacked completion-channel events */
    int wake_fd;
    _Atomic int fail_sent; /* fail() posted its notice (any thread: abort) */
    _Atomic int connected; /* QPs established */
    _Atomic int failed;    /* braid_result_t, 0 = none */
    _Atomic int peer_fail; /* the code of the peer's fail() notice, 0 = none (peer_failed) */
    /* Set by the rdma_cm side (a DISCONNECTED event): becomes the failure once the CQ is drained,
     * so a fail() text the peer sent before disconnecting is reported instead. */
    _Atomic int disconnected;
    char disc_msg[240];
    char fail_msg[400];
    char desc[160];
} rdma_conn_t;

typedef struct rdma_state {
    struct braid_comm *comm;
    struct rdma_state *next;
    pthread_mutex_t mu;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    struct sockaddr_storage laddr;
    int efd;
    pthread_t thread;
    int started, stop;
    rdma_conn_t *conns;
    /* The listener device's protection domain, shared by the connections on that device, and
     * the user registrations on it (braid_comm_register; rdma_mr.c). */
    struct ibv_pd *pd;
    struct braid_regcache *rc;
} rdma_state_t;

/* The private data of a connect request: 56 bytes, the most an RC connect request carries
 * through rdma_cm on InfiniBand and RoCE (92 bytes of REQ private data less rdma_cm's 36-byte
 * header). mac = the first 16 bytes of HMAC(secret, "braid-rdma-connect" | the receive
 * connection's nonce (its info blob) | i32 receiver's rank | the hello up to mac); the
 * accept's private data is the receiver's proof, the full HMAC with the label
 * "braid-rdma-listener" over the same bytes (rdma_conn.c, rdma_hello_mac). The job secret
 * never goes on the wire. */
#define RDMA_HELLO_MAC 16
typedef struct {
    uint32_t magic, version;
    int32_t rank, channel;
    int32_t qp, nqps;                 /* this QP's index, of nqps */
    uint8_t nonce[BRAID_NONCE_BYTES]; /* the connector's, fresh for each QP */
    uint8_t mac[RDMA_HELLO_MAC];
} rdma_hello_t;
_Static_assert(sizeof(rdma_hello_t) <= 56, "rdma_cm connect request private data");

/* The receiver's info blob. */
typedef struct {
    uint32_t magic, nslots;
    uint64_t slot_size, addr;
    uint32_t rkey;
    uint16_t family, port; /* port in network order */
    uint8_t ip[16];
    uint32_t nqps;                    /* QPs the receiver takes (its BRAID_IB_QPS_PER_CONN) */
    uint8_t nonce[BRAID_NONCE_BYTES]; /* the receive connection's (rdma_hello_t's MAC) */
} rdma_info_t;
_Static_assert(sizeof(rdma_info_t) <= RDMA_INFO_BYTES, "info blob");
_Static_assert(sizeof(braid_msg_hdr_t) <= RDMA_ZC_AT, "header");
_Static_assert(RDMA_ZC_AT + sizeof(rdma_zc_t) <= RDMA_HDR, "zero-copy trailer");
_Static_assert(sizeof(rdma_expose_t) <= RDMA_TEXT, "exposure");

/* rdma.c */
void braid_rdma_set_failed(rdma_conn_t *c, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records an rdma_cm disconnect of c (any thread); see `disconnected`. */
void braid_rdma_set_disconnected(rdma_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The connection's sticky failure as this thread's error, or BRAID_SUCCESS. */
braid_result_t braid_rdma_failure(rdma_conn_t *c);
void braid_rdma_wake_fd(int fd);
void braid_rdma_poll_cq(rdma_conn_t *c);

/* rdma_conn.c */
int braid_rdma_post_recv(rdma_conn_t *c, int q, uint32_t idx);
/* The landing buffer of receive WR idx of QP q. */
char *braid_rdma_landing(rdma_conn_t *c, int q, uint32_t idx);
/* 1 when every QP of c is established. */
int braid_rdma_all_connected(rdma_conn_t *c);
braid_result_t braid_rdma_recv_setup(struct braid_comm *comm, int peer, int channel,
                                     braid_conn_t **conn_p, void *info, size_t *info_len_p);
braid_result_t braid_rdma_send_connect(struct braid_comm *comm, int peer, int channel,
                                       const void *info, size_t info_len, braid_conn_t **conn_p);
braid_result_t braid_rdma_recv_accept(braid_conn_t *conn);
void braid_rdma_close(braid_conn_t *conn);
void braid_rdma_comm_cleanup(struct braid_comm *comm);

/* The communicator's state, or NULL when it has made no receive connection. */
rdma_state_t *braid_rdma_state_find(struct braid_comm *comm);

/* rdma_mr.c */
#define RDMA_REG_CACHE_MAX 64 /* registrations cached per communicator and device */
/* The state's protection domain and registration cache. */
braid_result_t braid_rdma_reg_init(rdma_state_t *st);
void braid_rdma_reg_free(rdma_state_t *st);
braid_result_t braid_rdma_mem_register(struct braid_comm *comm, void *buf, size_t bytes);
void braid_rdma_mem_deregister(struct braid_comm *comm, void *buf, size_t bytes);
/* Zero-copy: the receiver exposes [base, base + bytes) for collective seq (NULL withdraws);
 * the sender writes a message's payload straight to the exposed buffer at dst_off. */
void braid_rdma_recv_expose(braid_conn_t *conn, uint32_t seq, void *base, size_t bytes);
/* The collective that exposed conn's output failed: tells the peer (fail()) and moves the
 * connection's QPs to the error state, so no write of the peer can land in the output. */
void braid_rdma_recv_revoke(braid_conn_t *conn, braid_result_t code, const char *why);
braid_result_t braid_rdma_send_post_at(braid_conn_t *conn, const braid_msg_hdr_t *hdr,
                                       size_t dst_off);

/* rdma_dev.c */
/* ibv_fork_init, once, before the process's first verbs call (warns when fork is unsafe). */
void braid_rdma_fork_init(void);
struct ifaddrs;
/* The address of interface `name` in list for a listener whose address the info blob carries
 * (family, 16 bytes, port: no IPv6 scope): its first IPv4 address, else its first IPv6 one
 * that is not link-local. 0, or -1 if it has none. */
int braid_rdma_pick_ifaddr(const struct ifaddrs *list, const char *name,
                           struct sockaddr_storage *a);
/* The address the listener binds to (port 0) and why (for the log): BRAID_IB_HCA's port;
 * else, on a host with several active RDMA ports that reach every other host, one on the
 * rank's NUMA node (braid_comm_data_addr_filtered); else the route to the bootstrap root. */
braid_result_t braid_rdma_listen_addr(struct braid_comm *comm, struct sockaddr_storage *a,
                                      char *why, size_t len);
/* 1 when BRAID_IB_HCA or BRAID_IB_GID_INDEX chooses the local address. */
int braid_rdma_hca_chosen(void);
/* The address of the first active port BRAID_IB_HCA allows (GID by BRAID_IB_GID_INDEX). */
braid_result_t braid_rdma_hca_addr(struct sockaddr_storage *a);
/* After QP `id` of c is established: its path MTU must be min(port active MTU, route MTU);
 * logs the three at INFO NET and sets c->path_mtu. */
braid_result_t braid_rdma_check_mtu(rdma_conn_t *c, struct rdma_cm_id *id);

#endif
