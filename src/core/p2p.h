/* Point-to-point operations, their connections and batches (p2p_conn.c) and the runner
 * (p2p.c), groups and the public send/recv entry points (group.c), the collectives built on
 * point-to-point messages (coll_p2p.c, with their plans in algos/p2p_plan.c).
 *
 * Connections. At init every rank connects to every other rank once more, both ways, on the
 * channel id BRAID_SENDRECV_CHANNEL: these connections carry only braid_send/braid_recv and the
 * collectives of coll_p2p.c, never the messages of the ring, tree or recursive-doubling plans,
 * so point-to-point traffic cannot disturb their sequence-number matching (and the reverse).
 * Messages to self never touch a transport: a send to self is copied into a per-communicator
 * queue that receives from self take from, in order.
 *
 * Messages. An operation of `bytes` bytes travels as ceil(bytes / chunk) messages (one empty
 * message when bytes is 0), chunk = the connection's slot size (over tcp 512 KiB up to 8
 * ranks, BRAID_P2P_TCP_CHUNK_SIZE; reduce_scatterv: the collectives' chunk on every
 * connection, as its reducing receive folds one message of every peer at a time). Each
 * carries a braid_msg_hdr_t:
 * for braid_send the pair's sequence number (the sender's count of sends to that peer, which
 * the receiver matches against its count of receives from it), coll BRAID_COLL_SEND, the dtype
 * and count; for a collective its sequence number on the communicator, its coll/dtype/op/root
 * and the count of this message. A receiver that finds anything else reports
 * BRAID_ERR_MISMATCH naming both calls.
 *
 * Point-to-point against a collective (calls on a communicator run in order, so a send or
 * receive and a peer's later collective can never meet): a blocked receive tells its peer
 * once (a BRAID_MSG_NOTICE header-only message, skipped by receivers), and a peer inside a
 * collective that has not sent that message reports BRAID_ERR_MISMATCH naming both calls; a
 * blocked send (or receive) that sees a message of a later collective from the peer it waits
 * on (its ring predecessor, a latency plan's partner, or any rank of a p2p collective) does
 * the same; but a receive over any transport but shm (tcp, rdma) leaves the decision to the
 * peer's notice check, since the peer's messages of that receive may still be on their way
 * (queued, or in the kernel) when its later collective's have come on other connections. A
 * ring/tree collective blocked on a receive from a peer tells that peer too (a NOTICE of the
 * collective), so a send blocked on that rank (with 3 ranks, a send to the ring successor,
 * which sends the sender nothing) finds it. Not found (a timeout instead): a send blocked on a
 * rank whose collective waits for another rank, or whose notice sits behind messages of its
 * own that this rank has not received yet (over tcp/rdma also a blocked receive whose notice
 * cannot go out: the send connection to that peer full of messages it never takes).
 *
 * Batches. A batch is a list of operations that progress at the same time: each (peer,
 * direction) has a FIFO of the batch's operations on that connection, whose head moves as far
 * as its slots allow; when nothing moves the runner spins, yields and sleeps in the transports'
 * wait() (turn by turn on each blocked connection, so a dead peer is found whichever it is),
 * with BRAID_TIMEOUT and braid_comm_abort as everywhere. */
#ifndef BRAID_CORE_P2P_H
#define BRAID_CORE_P2P_H

#include "core/comm.h"

#include <stddef.h>
#include <stdint.h>

#define BRAID_SENDRECV_CHANNEL 33

typedef enum {
    BRAID_P2P_SEND = 0,        /* sbuf[0..count) to peer */
    BRAID_P2P_RECV = 1,        /* rbuf[0..count) from peer */
    BRAID_P2P_COPY = 2,        /* rbuf = sbuf locally (a collective's own block) */
    BRAID_P2P_RECV_REDUCE = 3, /* rbuf = fold in rank order of every rank's block: sbuf is this
                                * rank's, the others' arrive from every peer (reduce_scatterv) */
} braid_p2p_kind_t;

typedef struct braid_p2p_op {
    uint8_t kind; /* braid_p2p_kind_t */
    int peer;
    const void *sbuf;
    void *rbuf;
    size_t count; /* elements */
    braid_datatype_t dtype;
    /* Identity checked on every message: coll BRAID_COLL_SEND (seq = the pair's) or a
     * collective (seq = the communicator's; op and root as called). */
    int coll;
    uint32_t seq;
    braid_redop_t op;
    int root;
    int call;                  /* position in its group (1-based), 0 outside a group */
    struct braid_request *req; /* completed when the operation is (may be NULL) */
    /* Runner state. */
    size_t off;       /* bytes moved */
    int nmsgs;        /* messages moved */
    int done;         /* 1 when complete */
    int next;         /* next operation on the same connection, -1 = none */
    int noticed;      /* a blocked receive told its peer (BRAID_MSG_NOTICE) */
    int cma;          /* moved by CMA (p2p_cma.h): posted (send) or descriptor checked (receive) */
    void *cma_slot;   /* moved by CMA: its descriptor (the send's slot, as either end maps it) */
    int cma_pick;     /* a send's path once chosen: 0 not yet, 1 slots, 2 CMA (braid_p2p_cma_use) */
    int timed;        /* its copies are timed for braid_p2p_cma_pick (p2p_cma.h) */
    uint64_t copy_ns; /* a timed operation: ns this end spent copying its bytes */
    uint64_t tl0;     /* BRAID_TRACE: when it was linked, 0 = not recorded */
    /* A device buffer (p2p_dev.c): on_dev set by the call's checks; once the runner takes the
     * operation, sbuf/rbuf is the host copy `shadow` and dev_buf the caller's buffer. */
    int on_dev;
    void *dev_buf, *shadow;
} braid_p2p_op_t;

typedef struct braid_p2p_batch {
    braid_p2p_op_t *ops;
    int nops, cap;
    int heap; /* ops was allocated here (else it is the caller's: BRAID_P2P_BATCH_ON) */
} braid_p2p_batch_t;

/* A batch that starts in the caller's array of n operations (on the stack: no allocation for
 * the common small batch); it moves to the heap when it outgrows it. */
#define BRAID_P2P_BATCH_ON(arr, n) ((braid_p2p_batch_t){.ops = (arr), .cap = (n)})

/* Appends an operation (copied); BRAID_ERR_NOMEM on failure. */
braid_result_t braid_p2p_batch_add(braid_p2p_batch_t *b, const braid_p2p_op_t *op);
void braid_p2p_batch_free(braid_p2p_batch_t *b);

/* Called by the runner when it can take more operations (the worker's queue): appends to b
 * and returns how many it added. */
typedef int (*braid_p2p_pull_fn)(struct braid_comm *comm, braid_p2p_batch_t *b, void *arg);
/* Called when an operation with a request completes (res is its result). */
typedef void (*braid_p2p_done_fn)(struct braid_comm *comm, braid_p2p_op_t *op, braid_result_t res,
                                  void *arg);

/* Gives the point-to-point operations of b (kinds SEND/RECV, coll BRAID_COLL_SEND) their
 * pair sequence numbers, from index `from` on; call it once per operation, in call order. */
void braid_p2p_assign_seq(struct braid_comm *comm, braid_p2p_batch_t *b, int from);
/* Runs every operation of b to completion (operations added by pull too). On failure returns
 * the error, with a message naming the operation, after failing the communicator with it and
 * telling the peers (braid_comm_fail_call); done is called for operations with a request as
 * they complete (with the error for those that did not, once the peers were told). */
braid_result_t braid_p2p_run(struct braid_comm *comm, braid_p2p_batch_t *b, braid_p2p_pull_fn pull,
                             braid_p2p_done_fn done, void *arg);

/* "send #3 to rank 2 (count 10, float32)" for messages. */
void braid_p2p_op_str(const braid_p2p_op_t *op, char *buf, size_t len);

/* Connections at init (after the rings): every pair both ways (comm.c calls it). */
braid_result_t braid_p2p_connect(struct braid_comm *comm);
/* Closes them and frees the state (comm_free). */
void braid_p2p_close(struct braid_comm *comm);
/* Whether a message to self waits in the queue. */
int braid_p2p_self_pending(struct braid_comm *comm);
/* braid_comm_fail_peers for these connections. */
void braid_p2p_fail_peers(struct braid_comm *comm, braid_result_t code, const char *why);
/* "alltoall #3 (count 10 to rank 2, float32, sum, root -1)" for a message header (to: the
 * receiving rank, named for the collectives of coll_p2p.c). */
void braid_p2p_hdr_str(const braid_msg_hdr_t *h, int to, char *buf, size_t len);
/* The reason a REJECTED message carries (payload buf), as a string. */
void braid_p2p_reason(const braid_msg_hdr_t *h, const void *buf, size_t slot_size, char *out,
                      size_t len);
/* This rank's send/recv connection to / from peer (NULL for itself), and how many sends to
 * peer it has started (the pair's sequence number). */
braid_conn_t *braid_p2p_conn(struct braid_comm *comm, int peer, int is_send);
uint32_t braid_p2p_sent(struct braid_comm *comm, int peer);
/* Whether sends to peer of BRAID_P2P_CMA_MIN bytes or more go by CMA (p2p_cma.h), and how
 * many messages this rank has received that way (*bytes_p: bytes read so far, safe to read
 * from another thread while a receive runs); for tests. */
int braid_p2p_cma_peer(struct braid_comm *comm, int peer);
uint64_t braid_p2p_cma_pulls(struct braid_comm *comm, uint64_t *bytes_p);
/* The bytes this rank has written into its receivers' buffers as a helping sender, and in
 * *help_p (may be NULL) whether it helps (BRAID_P2P_CMA_HELP as resolved); for tests. */
uint64_t braid_p2p_cma_pushed(struct braid_comm *comm, int *help_p);
/* For tests (a sender still writing when its receive fails): on a sender, the next piece it
 * writes into a receiver's buffer waits stall_ns between its claim and its write, and from
 * then on braid_p2p_cma_test_stalled returns 1 (safe from another thread); on a receiver,
 * leave_first: its next CMA message's pieces wait until its sender has claimed one. */
void braid_p2p_cma_test_stall(struct braid_comm *comm, uint64_t stall_ns, int leave_first);
int braid_p2p_cma_test_stalled(struct braid_comm *comm);
/* For tests of the measured choice (braid_p2p_cma_pick): this rank's receives report the copy
 * time of path cma_path (1 single copy, 0 the slots) multiplied by factor (0: unscaled). */
void braid_p2p_cma_test_scale(struct braid_comm *comm, int cma_path, double factor);
/* How many communicators of this process hold PR_SET_PTRACER_ANY (p2p_cma.c); for tests. */
int braid_p2p_cma_ptracer_refs(void);
/* A message of collective seq on the collective engine's connections (a peer in a ring, tree
 * or recursive-doubling collective of that number) while this rank runs `mine` (verb:
 * "called" or "rejected its"): BRAID_ERR_MISMATCH naming both; else BRAID_SUCCESS. With
 * from >= 0: only rank from's messages, of number seq or later. */
braid_result_t braid_p2p_coll_foreign(struct braid_comm *comm, uint32_t seq, int from,
                                      const char *verb, const char *mine);
/* A BRAID_MSG_NOTICE message h at the head of the connection from peer p: rank p is blocked
 * in a receive from this rank. When this rank runs collective seq (verb: "called" or "rejected
 * its", and mine describe it; 0 = not in a collective) that p has not reached and has not sent
 * p that message, the two can never meet: BRAID_ERR_MISMATCH naming both calls. Else the
 * notice is released (BRAID_SUCCESS); a receive's notice that is no mismatch yet (this rank
 * still in the collective p left before its receive, or in a send or receive) is kept, and
 * braid_p2p_check_foreign checks it again in this rank's later collectives. */
braid_result_t braid_p2p_take_notice(struct braid_comm *comm, int p, const braid_msg_hdr_t *h,
                                     uint32_t seq, const char *verb, const char *mine);
/* A ring/tree collective (mine: its descriptor) that waits to receive from peer tells that
 * peer, once per call (a BRAID_MSG_NOTICE message of the collective's kind and number on the
 * send/recv connection; best effort: only where a slot is free). braid_p2p_take_notice on a
 * notice of a collective q that this rank, in a send or receive (seq 0), has not reached is a
 * mismatch: the peer's part of that operation can only come after q, which needs this rank.
 * braid_p2p_peek_coll_notice looks for one at the head of the connection from p (a blocked
 * send to p: mine describes it). */
void braid_p2p_coll_notice(struct braid_comm *comm, int peer, const braid_msg_hdr_t *mine);
braid_result_t braid_p2p_peek_coll_notice(struct braid_comm *comm, int p, const char *mine);
/* A send or receive of a batch (op, waiting in direction dir) found blocked by the runner:
 * BRAID_ERR_MISMATCH when its peer is in a later collective (braid_p2p_coll_foreign) or, for
 * a send, waits for this rank in one (braid_p2p_peek_coll_notice), unless the operation has
 * completed on the peer's side since it was found blocked. */
braid_result_t braid_p2p_blocked_foreign(struct braid_comm *comm, const braid_p2p_op_t *op,
                                         int dir);
/* From the collective engine's mismatch check: a message of collective seq from another call
 * on these connections is BRAID_ERR_MISMATCH naming both (mine describes this rank's call). */
braid_result_t braid_p2p_check_foreign(struct braid_comm *comm, const braid_msg_hdr_t *mine);

/* A collective on the send/recv connections (coll_p2p.c): the call's arguments, with the
 * per-rank count and displacement arrays copied (nranks entries each, NULL where unused). */
typedef struct braid_pcoll {
    int coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    braid_datatype_t dtype;
    braid_redop_t op;
    int root;
    size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* one allocation at sendcounts */
    /* reduce_scatterv with a created PreMulSum op (resolved by the checks): op is then
     * BRAID_OP_WIRE_PREMULSUM on the messages and sum in the kernels, scalar its value. */
    int premul;
    uint64_t scalar;
    int dev_send, dev_recv; /* the buffer is device memory: staged (p2p_dev.c) */
    /* alltoall in place: sendbuf is a copy of the other ranks' blocks, the own block is
     * already where it belongs (the plan has no COPY) */
    int own_in_place;
} braid_pcoll_t;

/* Device buffers (p2p_dev.c; braid_dev_buf_check in coll_dev.c). braid_dev_buf_check: *on_dev = 1
 * when p is memory of comm's CUDA device; device memory of another device, or on a communicator
 * without one, is an error naming the buffer. braid_p2p_stage_in (the runner, before it moves op):
 * a device buffer's host copy (a send's bytes copied); braid_p2p_stage_out (when op completes with
 * res): a receive's bytes copied to the device; returns res, or the copy's error. */
braid_result_t braid_dev_buf_check(struct braid_comm *comm, const char *name, const char *bufname,
                                   const void *p, int *on_dev);
/* A call on device buffers (not a stream-ordered one), on the caller's thread as it is made:
 * waits, bounded by the timeout, for the device work issued before it on the legacy default
 * stream and the blocking streams (a cudaMemcpy from pageable memory returns before its DMA
 * lands; braid's own streams are non-blocking). Never on the worker: a stream-ordered call
 * queued there holds its stream, and the legacy stream waits for it. */
braid_result_t braid_dev_ready(struct braid_comm *comm);
braid_result_t braid_p2p_stage_in(struct braid_comm *comm, braid_p2p_op_t *op);
braid_result_t braid_p2p_stage_out(struct braid_comm *comm, braid_p2p_op_t *op, braid_result_t res);
/* A p2p collective's device buffers: p (a copy of the call) gets host images of its
 * in_bytes/out_bytes (the input's bytes copied), *tmp_p the allocation (NULL: none); then
 * braid_pcoll_stage_out copies the output to orig's recvbuf and frees tmp. */
braid_result_t braid_pcoll_stage_in(struct braid_comm *comm, braid_pcoll_t *p, size_t in_bytes,
                                    size_t out_bytes, void **tmp_p);
braid_result_t braid_pcoll_stage_out(struct braid_comm *comm, const braid_pcoll_t *orig,
                                     const braid_pcoll_t *p, size_t out_bytes, void *tmp);
/* Tests: the staging copies through fn (plain memcpy of simulated device memory) instead of
 * CUDA; NULL restores CUDA. */
void braid_p2p_test_set_copier(braid_result_t (*fn)(void *dst, const void *src, size_t bytes));
/* Host images of device buffers (p2p_dev.c): braid_dev_shadow_get returns one of at least
 * bytes, reusing one a finished call gave back (NULL: out of memory, the error set);
 * braid_dev_shadow_put gives it back (NULL: nothing). A few are kept per communicator, so a
 * loop of calls of one size allocates (and faults in) its images once; braid_dev_shadows_free
 * (comm destroy) frees them. braid_dev_shadow_allocs: how many images comm allocated (tests). */
void *braid_dev_shadow_get(struct braid_comm *comm, size_t bytes);
void braid_dev_shadow_put(void *p);
void braid_dev_shadows_free(struct braid_comm *comm);
uint64_t braid_dev_shadow_allocs(struct braid_comm *comm);
/* Tests: braid_dev_ready calls fn instead of waiting for CUDA (NULL restores it). */
void braid_dev_test_set_ready(braid_result_t (*fn)(void));

/* Runs a validated p2p collective on the calling thread: takes the next sequence number and,
 * on failure, records the sticky error and tells the peers (as braid_coll_execute). call is
 * its place in a group (0 = none). Does not free pc's arrays. */
braid_result_t braid_pcoll_execute(struct braid_comm *comm, const braid_pcoll_t *pc, int call);
void braid_pcoll_free(braid_pcoll_t *pc);
/* The exchange of a p2p collective that argument checks refused (braid_call_reject). */
braid_result_t braid_pcoll_reject_exchange(struct braid_comm *comm, const braid_msg_hdr_t *desc,
                                           const char *reason, const void *arg);

/* One deferred call of a group on one communicator. */
typedef enum { BRAID_ITEM_COLL = 0, BRAID_ITEM_PCOLL = 1, BRAID_ITEM_P2P = 2 } braid_item_kind_t;
typedef struct {
    int kind;     /* braid_item_kind_t */
    int call;     /* 1-based position in the group */
    int rejected; /* it failed its checks (kept only to tell the peers: group_reject.c) */
    int fused;    /* group end ran it already, as part of a fused run (group_fuse.c) */
    union {       /* by kind (an item was the three side by side, 328 bytes, copied per call) */
        braid_op_args_t args; /* BRAID_ITEM_COLL */
        braid_pcoll_t pc;     /* BRAID_ITEM_PCOLL */
        braid_p2p_op_t op;    /* BRAID_ITEM_P2P */
    };
    struct braid_request *req; /* of an i-form call, completed at group end; else NULL */
} braid_group_item_t;

/* Work a request carries instead of a collective's args. */
typedef enum { BRAID_TASK_P2P = 1, BRAID_TASK_PCOLL = 2, BRAID_TASK_GROUP = 3 } braid_task_kind_t;
typedef struct braid_task {
    int kind;
    braid_p2p_op_t op;         /* P2P: one send or receive */
    braid_pcoll_t pc;          /* PCOLL */
    braid_group_item_t *items; /* GROUP: this communicator's calls of the group */
    int nitems;
    braid_result_t reject_res; /* GROUP: < 0 when a call of the group failed its checks: */
    const char *reject_msg;    /* nothing is issued, the peers are told (group_reject.c) */
} braid_task_t;

/* Groups (group.c): the calling thread's group depth (0 = none); entry points that check
 * their arguments inside a group call braid_group_note (it counts the call and keeps its
 * error for group end), then add the checked call. */
int braid_group_depth(void);
/* Whether req is a request of a call in the calling thread's open group: it completes only at
 * that thread's braid_group_end, so a wait for it there would never return. */
int braid_group_holds(const struct braid_request *req);
braid_result_t braid_group_note(braid_result_t res, const char *what);
/* Keeps a call that failed its checks (res < 0, returned) in the group, so that group end can
 * tell the peers (the arrays of a p2p collective are not kept). */
braid_result_t braid_group_add_rejected(struct braid_comm *comm, const braid_group_item_t *it,
                                        braid_result_t res);
/* A group of which a call failed its checks on this rank: none of its calls of communicator
 * comm is issued, but they take their numbers and tell the peers instead (REJECTED messages,
 * payload `reason`), in the order group end would have run them: each collective (as
 * braid_call_reject does outside a group), then for all the sends and receives (to other
 * ranks) together one REJECTED exchange with every rank (coll BRAID_COLL_GROUP, a collective
 * number; no pair numbers). BRAID_SUCCESS when every peer rejected its calls of those numbers
 * too (the communicator stays usable); else the error naming both calls, with the
 * communicator failed and its peers told (group_reject.c). */
braid_result_t braid_group_reject_items(struct braid_comm *comm, braid_group_item_t *items, int n,
                                        const char *reason);
braid_result_t braid_group_add_coll(struct braid_comm *comm, const braid_op_args_t *a,
                                    braid_request_t *req_p);

/* Fusion of a group's small all-reduces, reduce-scatters, all-gathers, broadcasts or reduces
 * (group_fuse.c). A run: up to BRAID_FUSE_MAX_CALLS collective items of one kind in call order
 * (sends and receives skipped) that run as one call of that kind. */
#define BRAID_FUSE_MAX_CALLS 64
typedef struct {
    int idx[BRAID_FUSE_MAX_CALLS]; /* the items, in call order */
    int k;                         /* how many (0: items[from] starts no run) */
    size_t total;                  /* their counts added up (all-gathers, broadcasts: bytes) */
    braid_op_args_t args;          /* the fused call, buffers unset: counts, flag, padding */
} braid_fuse_t;
/* At init, after the peers' information: reads BRAID_GROUP_FUSE_BYTES and allocates the
 * buffer (none, and no fusion, where every rank has a CUDA device: groups there hold device
 * buffers, which are not fused; broadcasts and reduces fuse only where no rank has one). */
braid_result_t braid_group_fuse_init(struct braid_comm *comm);
/* Whether items[from] starts a run of two or more (its size, else 0), from the calls'
 * collective, count, dtype, op and root only (so every rank groups alike). Items marked fused
 * are never part of one. */
int braid_group_fuse_find(const struct braid_comm *comm, const braid_group_item_t *items, int n,
                          int from, braid_fuse_t *f);
/* Runs f as one call and writes the outputs; *fell_back = 1 (outputs untouched) where a
 * rank could not pack its inputs: the calls must then run one by one (never for broadcasts and
 * reduces). On failure msg names the calls. Completes no request. */
braid_result_t braid_group_fuse_run(struct braid_comm *comm, braid_group_item_t *items,
                                    const braid_fuse_t *f, int *fell_back, char *msg,
                                    size_t msglen);
/* Takes ownership of pc's arrays. */
braid_result_t braid_group_add_pcoll(struct braid_comm *comm, const braid_pcoll_t *pc,
                                     braid_request_t *req_p);

/* The plan of a p2p collective (algos/p2p_plan.c): appends this rank's operations (sends,
 * receives, local copies, the reducing receive) for collective seq to b. Pure but for the
 * batch's memory. In round k = 1..n-1 a rank sends to rank + k and receives from rank - k. */
braid_result_t braid_pcoll_plan(const braid_pcoll_t *pc, int nranks, int rank, uint32_t seq,
                                braid_p2p_batch_t *b);

/* Runs a request's task on the worker thread and completes it (and the requests it pulled
 * from the queue) with braid_worker_complete (group.c). */
void braid_task_execute(struct braid_comm *comm, struct braid_request *req);
/* Frees a task (its request is being freed). */
void braid_task_free(struct braid_task *t);

#endif
