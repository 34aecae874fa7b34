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
#define RDMA_VERSION 1u
#define RDMA_HDR 64u          /* header bytes in front of every slot's payload */
#define RDMA_CTRL 0x80000000u /* immediate: a failure code, not a sequence number */
#define RDMA_SEQ_MASK 0x7fffffffu
#define RDMA_INFO_BYTES 56
#define RDMA_EXTRA_WR 8
#define RDMA_INLINE_WANT 256
#define RDMA_TEXT 256 /* bytes of a fail() text; every receive WR may land one in `rx_text` */

struct rdma_state;

typedef struct rdma_conn {
    braid_conn_t base;
    struct rdma_state *st;
    struct rdma_conn *next; /* receive connections of the state */
    struct rdma_cm_id *id;
    struct rdma_event_channel *ch; /* sender: its own channel */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *buf; /* nslots slots, then the receive and send areas of fail() texts */
    char *rx_text, *tx_text;
    size_t buf_len, stride;
    uint32_t nslots;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t pos;  /* next slot to post (send) or read (recv) */
    uint32_t head; /* receiver: messages arrived */
    uint32_t tail; /* sender: slots released by the receiver (credits) */
    uint32_t sq_out, sq_max, rq_depth, max_inline;
    unsigned cq_events; /* unacked completion-channel events */
    int wake_fd;
    int fail_sent;
    _Atomic int connected;
    _Atomic int failed; /* braid_result_t, 0 = none */
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
} rdma_state_t;

/* The private data of a connect request. */
typedef struct {
    uint32_t magic, version;
    uint8_t secret[BRAID_SECRET_BYTES];
    int32_t rank, channel;
} rdma_hello_t;

/* The receiver's info blob. */
typedef struct {
    uint32_t magic, nslots;
    uint64_t slot_size, addr;
    uint32_t rkey;
    uint16_t family, port; /* port in network order */
    uint8_t ip[16];
} rdma_info_t;
_Static_assert(sizeof(rdma_info_t) <= RDMA_INFO_BYTES, "info blob");
_Static_assert(sizeof(braid_msg_hdr_t) <= RDMA_HDR, "header");

/* rdma.c */
void braid_rdma_set_failed(rdma_conn_t *c, braid_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The connection's sticky failure as this thread's error, or BRAID_SUCCESS. */
braid_result_t braid_rdma_failure(rdma_conn_t *c);
void braid_rdma_wake_fd(int fd);
void braid_rdma_poll_cq(rdma_conn_t *c);

/* rdma_conn.c */
int braid_rdma_post_recv(rdma_conn_t *c);
braid_result_t braid_rdma_recv_setup(struct braid_comm *comm, int peer, int channel,
                                     braid_conn_t **conn_p, void *info, size_t *info_len_p);
braid_result_t braid_rdma_send_connect(struct braid_comm *comm, int peer, int channel,
                                       const void *info, size_t info_len, braid_conn_t **conn_p);
braid_result_t braid_rdma_recv_accept(braid_conn_t *conn);
void braid_rdma_close(braid_conn_t *conn);
void braid_rdma_comm_cleanup(struct braid_comm *comm);

/* rdma_dev.c */
/* The address the listener binds to (port 0). */
braid_result_t braid_rdma_listen_addr(struct braid_comm *comm, struct sockaddr_storage *a);
/* 1 when BRAID_IB_HCA or BRAID_IB_GID_INDEX chooses the local address. */
int braid_rdma_hca_chosen(void);
/* The address of the first active port BRAID_IB_HCA allows (GID by BRAID_IB_GID_INDEX). */
braid_result_t braid_rdma_hca_addr(struct sockaddr_storage *a);

#endif
