/* The communicator's internal state, shared by core/, algos/ and transport/. */
#ifndef BRAID_CORE_COMM_H
#define BRAID_CORE_COMM_H

#include "braid/braid.h"
#include "core/bootstrap.h"
#include "topo/topo.h"
#include "transport/transport.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#define BRAID_MAX_CHANNELS 16
/* The channel id the transports see for point-to-point connections (tcp's hello: < 64). */
#define BRAID_P2P_CHANNEL 32
#define BRAID_P2P_MAX_CHUNK ((size_t)64 << 10)
#define BRAID_P2P_MAX_SLOTS 4
#define BRAID_HOST_ID_BYTES 64
/* The longest timeout, about 32 years: BRAID_TIMEOUT=0 and anything longer, and longer values
 * given to braid_comm_set_timeout, are taken as this. In nanoseconds it fits a uint64_t with room
 * for the clock it is added to. */
#define BRAID_TIMEOUT_MAX_S 1e9

/* timeout_s in nanoseconds, at most BRAID_TIMEOUT_MAX_S's (never past a uint64_t); 0 for <= 0. */
static inline uint64_t braid_timeout_ns(double timeout_s)
{
    if (!(timeout_s > 0)) return 0;
    return (uint64_t)((timeout_s < BRAID_TIMEOUT_MAX_S ? timeout_s : BRAID_TIMEOUT_MAX_S) * 1e9);
}

typedef enum {
    BRAID_COLL_ALLREDUCE = 1,
    BRAID_COLL_BROADCAST = 2,
    BRAID_COLL_REDUCE = 3,
    BRAID_COLL_REDUCE_SCATTER = 4,
    BRAID_COLL_ALLGATHER = 5,
    BRAID_COLL_BARRIER = 6,
    /* Point-to-point and the collectives built on it (core/p2p.h). */
    BRAID_COLL_SEND = 7,
    BRAID_COLL_RECV = 8,
    BRAID_COLL_ALLTOALL = 9,
    BRAID_COLL_ALLTOALLV = 10,
    BRAID_COLL_GATHER = 11,
    BRAID_COLL_SCATTER = 12,
    BRAID_COLL_ALLGATHERV = 13,
    BRAID_COLL_REDUCE_SCATTERV = 14,
    /* The sends and receives of a group that argument checks rejected (core/group_reject.c):
     * one REJECTED message to every rank, numbered as a collective. */
    BRAID_COLL_GROUP = 15,
    /* braid_comm_split's descriptor exchange on the data connections (core/split.c): a count-0
     * call, so a split against a collective on another rank is a mismatch, not a hang. */
    BRAID_COLL_COMM_SPLIT = 100
} braid_coll_t;

const char *braid_coll_name(int coll);

/* What each rank publishes at init (allgathered through the bootstrap). */
typedef struct {
    char host[BRAID_HOST_ID_BYTES]; /* host identity: equal strings = same host */
    /* the kernel it runs on (boot id): hosts made of namespaces or containers on one machine
     * share that machine's cpus */
    char machine[BRAID_HOST_ID_BYTES];
    cpu_set_t cpus; /* the cpus it may run on (its binding) */
    int32_t pid;
    int32_t rank;
    int32_t cuda_dev; /* the communicator's CUDA device, -1 for none (cuda/executor.c) */
    int32_t pad;
    braid_topo_place_t place; /* NUMA node of its cpus, local NICs and GPUs */
    braid_topo_addrs_t addrs; /* its host's interface addresses (NIC choice, core/netaddr.c) */
} braid_peer_info_t;

typedef struct {
    int prev, next;     /* ring neighbours in rank numbering */
    braid_conn_t *send; /* to next */
    braid_conn_t *recv; /* from prev */
} braid_ring_t;

/* One queued non-blocking operation (see coll.c). */
typedef struct braid_op_args {
    int coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    braid_datatype_t dtype;
    braid_redop_t op; /* a built-in op (a created one is resolved into premul/scalar) */
    int root;
    int premul;      /* BRAID_PREMUL_* (core/redop.h): op is then BRAID_SUM for the kernels */
    uint64_t scalar; /* its scalar, one element of dtype */
    int on_device;   /* 1: the buffers are CUDA memory of comm->cuda_dev (set by the checks) */
    /* > 0: a call of a group's calls fused (core/group_fuse.c): their number (low 7 bits) and
     * a hash of their counts (and dtypes), which the descriptor carries in its count's top
     * half (braid_engine_desc) */
    int32_t fused;
} braid_op_args_t;

/* A request's life (state): LIVE from braid_worker_submit until a waiter claims it (WAITING,
 * one braid_wait / braid_test at a time), FREED once braid_wait / braid_test returned its result
 * (then kept in a quarantine of recently freed requests, so a second wait on the handle is
 * detected instead of reading reused memory; see worker.c). Completion is signalled under a
 * process-wide lock, never the communicator's, so a request outlives its communicator. */
enum { BRAID_REQ_NEW = 0, BRAID_REQ_LIVE = 0x52514c56, BRAID_REQ_WAITING, BRAID_REQ_FREED };

struct braid_request {
    braid_op_args_t args;
    struct braid_task *task; /* point-to-point work, a group or a p2p collective (core/p2p.h);
                              * NULL: args is a collective */
    struct braid_comm *comm; /* the worker's; never read by braid_wait / braid_test */
    struct braid_request *next;
    _Atomic uint32_t state;
    _Atomic int done;
    uint64_t done_ns; /* braid_now_ns() when it completed (braid_wait_time / braid_test_time) */
    braid_result_t result;
    char errmsg[512];
    /* Stream-ordered operations (src/cuda/stream.c): nobody waits on the request (the worker
     * frees it); it runs after cuda_event and then releases the stream's wait for cuda_ticket. */
    int detached;
    void *cuda_event;
    uint64_t cuda_ticket;
};

/* The kernel's struct sched_attr (linux/sched/types.h, first version: 48 bytes), for
 * sched_setattr / sched_getattr, which glibc 2.36 does not wrap. */
typedef struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} braid_sched_attr_t;

struct braid_comm {
    uint64_t magic;
    int rank, nranks;
    braid_bootstrap_t *boot;
    braid_boot_root_t *root;  /* the bootstrap root service this process hosts, if any */
    braid_peer_info_t *peers; /* nranks entries */
    int local_nranks;         /* ranks on this host */
    int machine_nranks;       /* ranks on this machine (>= local_nranks) */
    int ncpus;                /* cores this process may run on */
    int machine_ncpus;        /* cores the ranks on this machine may run on, together */
    int oversubscribed;       /* machine_nranks > machine_ncpus */
    /* braid's own threads (tcp progress, non-blocking worker) run on thread_cpus when
     * pin_threads (BRAID_THREAD_AFFINITY, resolved at init from the rank's cpuset). */
    int pin_threads;
    cpu_set_t thread_cpus;
    int worker_rt; /* BRAID_WORKER_RT: SCHED_FIFO priority of the worker thread, 0 = none */
    _Atomic int worker_rt_on;    /* the worker thread got it (set by the worker at its start) */
    int worker_slice_us;         /* BRAID_WORKER_SLICE_US: the worker and tcp threads' slice */
    _Atomic int worker_slice_on; /* the kernel took it for the worker thread */

    /* Tuning, read from the environment at init. */
    double timeout_s;
    int nchannels;
    size_t chunk_bytes;
    int nslots;
    int spin_us;
    size_t fuse_bytes; /* BRAID_GROUP_FUSE_BYTES, 0 = off (core/group_fuse.c) */
    /* BRAID_GROUP_FUSE_BYTES and BRAID_P2P_TCP_CHUNK_SIZE as read (or inherited by a hier
     * sub-communicator) and compared across ranks at init (core/settings.c), used from here. */
    int64_t fuse_bytes_set, p2p_tcp_chunk_set;
    void *fuse_buf;                     /* the fused calls' buffer: fuse_bytes + 64 per rank */
    void *pc_scratch;                   /* the copy of an in-place all-to-all(v)'s input, kept */
    size_t pc_scratch_bytes;            /* up to BRAID_PCOLL_SCRATCH_KEEP (core/coll_p2p.c) */
    int fuse_rooted;                    /* broadcasts and reduces fuse too (no rank has a GPU) */
    int yield_us;                       /* then sched_yield() for this long before sleeping */
    uint64_t yield_slow_ns;             /* a longer yield starts a hold-off (core/yield.h) */
    const braid_transport_t *transport; /* forced by BRAID_TRANSPORT, or NULL */
    int algo; /* forced by BRAID_ALGO (braid_algo_t in algos/algo.h), -1 = automatic */

    braid_ring_t ring[BRAID_MAX_CHANNELS];
    int *ring_order; /* ring position -> rank (hosts contiguous, see topo/topo.h) */
    int ring_pos;    /* this rank's ring position */
    /* Point-to-point connections of the latency algorithms (recursive doubling), made at init
     * for the pairs they use: nranks entries each, NULL for ranks never talked to directly.
     * Their own FIFOs (never shared with the ring), p2p_chunk_bytes slots of fewer slots. */
    braid_conn_t **p2p_send, **p2p_recv;
    size_t p2p_chunk_bytes;
    /* The tcp transport's slot size and sockets per peer for connections made while these
     * are non-zero (core/p2p.c sets them around the send/recv connections' setup: larger
     * messages and more sockets there than the rings'); 0 = chunk_bytes, BRAID_NSOCKS_PERPEER. */
    size_t tcp_conn_slot;
    int tcp_conn_nsocks;
    void *tcp_state;                     /* owned by transport/tcp*.c (listener, progress thread) */
    struct braid_algo_state *algo_state; /* owned by algos/select.c (topology, model, sub-comms) */
    struct braid_redop_table *redops;    /* owned by core/redop.c (created ops) */
    braid_boot_addr_t boot_addr; /* root address and job secret (tcp authenticates with it) */
    uint32_t seq;                /* collectives started */
    int tl_index; /* its rows in the BRAID_TRACE timeline (core/timeline.c), -1 = none */
    int tl_algo;  /* the algorithm braid_algo_execute picked for the call, -1 = none */
    struct braid_p2p_state *p2p; /* owned by core/p2p.c (send/recv connections, pair seqs) */
    /* Direct shared-memory segments of a communicator on one host (transport/shm_direct.h),
     * NULL when there are none. */
    struct braid_direct *direct;
    size_t direct_block;   /* BRAID_DIRECT_BLOCK (equal on every rank), 0 = off */
    int direct_block_auto; /* it was auto (BRAID_DIRECT_BLOCK_DEFAULT) */
    size_t direct_nt_min; /* BRAID_NT_MIN: outputs from this size use streaming stores, 0 = never */
    int direct_pipeline;  /* BRAID_DIRECT_PIPELINE: stage the next block before the gather */
    int direct_nt_slots;  /* BRAID_DIRECT_NT_SLOTS: copies into the slots by streaming stores */
    /* BRAID_DIRECT_NT_SLOTS=auto on x86-64 where streaming stores are not the default: the
     * direct collectives measure both kinds per collective and size (algos/direct_pick.c),
     * taking direct_nt_slots until they have */
    int direct_nt_pick;
    int p2p_nt_slots; /* BRAID_P2P_NT_SLOTS: 0 plain, 1 streaming, 2 measured (ntpick.h) */
    /* The descriptors of the last BRAID_HIST calls (by seq % BRAID_HIST), so a message left
     * over from an earlier call names both sides of that call (engine.c). */
#define BRAID_HIST 8
    braid_msg_hdr_t hist[BRAID_HIST];

    /* A hier sub-communicator's parent (algos/hier.c): while a call sleeps, the waits also run
     * watch(watch_parent, idle ns) (braid_comm_watch), which checks the parent's call. NULL:
     * none. */
    braid_result_t (*watch)(struct braid_comm *parent, uint64_t idle_ns);
    struct braid_comm *watch_parent;

    _Atomic int aborted;
    _Atomic int error; /* sticky braid_result_t, 0 = none */
    /* Entry guard (comm.c): public calls inside the communicator now (braid_comm_enter, under
     * the registry's lock), which braid_comm_destroy waits out; destroying is set once destroy
     * removed the communicator from the registry (then in-flight calls are aborted); busy
     * names the collective a thread is running (one thread at a time, braid_comm_enter_call). */
    _Atomic int inflight;
    _Atomic int destroying;
    _Atomic(const char *) busy;
    char errmsg[1024];
    pthread_mutex_t err_lock;

    /* Non-blocking operations: run in order by a worker thread started on first use. */
    pthread_mutex_t q_lock;
    pthread_cond_t q_cond;
    struct braid_request *q_head, *q_tail;
    _Atomic int q_pending;     /* queued or running; changed under q_lock, read without it */
    int q_running;             /* a thread (the worker, a braid_wait helping) runs a queued one */
    int q_helpers;             /* threads in braid_wait that run queued collectives (worker.c) */
    int q_help_waiting;        /* of those, waiting for the running one to end */
    uint64_t q_helper_left_ns; /* when the last of them returned */
    uint64_t q_helped;         /* requests run by waiting threads (tests look) */
    int worker_sleep;          /* -1: the worker starts, 1: it waits for a request, 2: it polls */
    int worker_started, worker_stop;
    pthread_t worker;

    /* CUDA (src/cuda): the device this communicator uses (the caller's current device at
     * init), -1 when the process has none; the CUDA state (staging, stream-ordered queue). */
    int cuda_dev;
    struct braid_cuda_comm *cuda;
    /* Host images of device buffers kept for reuse (core/p2p_dev.c); NULL until the first. */
    struct braid_dev_shadows *_Atomic shadows;
};

#define BRAID_COMM_MAGIC 0x62726169645f636dULL

/* Validates a communicator handle (NULL, never created, destroyed): 0 or an error naming it.
 * Prefer braid_comm_enter: a check alone does not keep a concurrent destroy from freeing comm. */
braid_result_t braid_comm_check(struct braid_comm *comm);
/* Every public entry that uses a communicator brackets its work with enter / leave: enter
 * validates the handle (as braid_comm_check) and counts the call in flight atomically with
 * the registry lookup, so braid_comm_destroy (from another thread) aborts the calls in flight
 * and frees the communicator only after they left. */
braid_result_t braid_comm_enter(struct braid_comm *comm);
void braid_comm_leave(struct braid_comm *comm);
/* enter + the threading rule for calls that run collectives (what: the call's name): a
 * second thread entering while one is inside gets BRAID_ERR_INVALID_USAGE naming both calls,
 * and the communicator fails (sticky error, peers told) because the two threads' calls can no
 * longer be matched with the peers' in order. leave_call undoes enter_call. */
braid_result_t braid_comm_enter_call(struct braid_comm *comm, const char *what);
void braid_comm_leave_call(struct braid_comm *comm);
/* The registry (registry.c): add at the end of init; remove at destroy (0 when comm was not
 * live); retire hands the freed communicator's memory to the quarantine (COMM_QUARANTINE). */
braid_result_t braid_comm_registry_add(struct braid_comm *comm);
int braid_comm_registry_remove(struct braid_comm *comm);
void braid_comm_registry_retire(struct braid_comm *comm);
/* Why comm's calls are aborted, for messages: braid_comm_abort, or a destroy in flight. */
static inline const char *braid_comm_abort_reason(struct braid_comm *comm)
{
    return atomic_load(&comm->destroying)
               ? "the communicator was destroyed by braid_comm_destroy (from another thread)"
               : "aborted by braid_comm_abort";
}
/* For a call of comm that sleeps (for idle_ns so far): BRAID_SUCCESS, or the error of the watch
 * hook (a hier stage whose parent's call failed, or found a peer in another call). */
static inline braid_result_t braid_comm_watch(struct braid_comm *comm, uint64_t idle_ns)
{
    return comm->watch ? comm->watch(comm->watch_parent, idle_ns) : BRAID_SUCCESS;
}
/* Records the first asynchronous error of comm (sticky) and sets the thread's message. */
braid_result_t braid_comm_set_error(struct braid_comm *comm, braid_result_t res, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));
/* Tells every peer this rank failed, wakes local waiters. */
void braid_comm_fail_peers(struct braid_comm *comm, braid_result_t code, const char *why);
/* The first failure notice (braid_comm_fail_peers) of a peer on any incoming connection of
 * this rank, as that peer's error; BRAID_SUCCESS if none. For ranks blocked on another
 * peer's data: the engine's and the p2p runner's periodic checks while they sleep, once they
 * have slept BRAID_PEER_FAILURE_GRACE_NS (a notice may overtake the last messages of a call
 * this rank can still complete: those arrive well within it, and the call then succeeds, the
 * error coming from the next one). */
braid_result_t braid_comm_peer_failure(struct braid_comm *comm);
#define BRAID_PEER_FAILURE_GRACE_NS 50000000ull
/* A call of comm failed with res (< 0; the thread's last error says why): the communicator
 * takes the error (sticky) and every peer is told "rank R: <why>". */
void braid_comm_fail_call(struct braid_comm *comm, braid_result_t res);

/* The transport this rank uses with peer (BRAID_TRANSPORT, else shm on the same host, else
 * the network transport); an error when none can reach it. */
braid_result_t braid_comm_pick_transport(struct braid_comm *comm, int peer,
                                         const braid_transport_t **t_p);

/* Unique ids and the roots this process hosts (hosted.c). braid_hosted_take: the root that
 * braid_get_unique_id started for the id with this secret (NULL if none), now the caller's.
 * braid_unique_id_near: an id whose root listens on the address this process uses towards
 * near's root (braid_boot_listen_addr; a split's root follows its parent's bootstrap), with the
 * given secret (BRAID_SECRET_BYTES; NULL: a random one).
 * braid_unique_id_abandon: stops the hosted root of an id nobody will use. */
braid_boot_root_t *braid_hosted_take(const uint8_t *secret);
braid_result_t braid_unique_id_near(const braid_boot_addr_t *near, const uint8_t *secret,
                                    braid_unique_id_t *id_p);
void braid_unique_id_abandon(const braid_unique_id_t *id);

/* The local address (port 0) of this rank's data listeners and why it was chosen (for the
 * log): BRAID_SOCKET_IFNAME's, else a NIC local to the rank's NUMA node when its host has
 * several that reach every other host (topo/nic.c), else the route to the bootstrap root.
 * Needs comm->peers (after the init allgather). */
braid_result_t braid_comm_data_addr(struct braid_comm *comm, struct sockaddr_storage *a_p,
                                    socklen_t *len_p, char *why, size_t len);
/* The same with the NICs narrowed first: filter rewrites nics[0..nnics) in place (hooked: they
 * came from BRAID_NIC_NUMA) and returns how many remain; it runs only when the choice is made
 * (several hosts, BRAID_SOCKET_IFNAME unset). rdma keeps the NICs with an active RDMA port. */
typedef int (*braid_comm_nic_filter_fn)(braid_topo_dev_t *nics, int nnics, int hooked, void *arg);
braid_result_t braid_comm_data_addr_filtered(struct braid_comm *comm,
                                             braid_comm_nic_filter_fn filter, void *arg,
                                             struct sockaddr_storage *a_p, socklen_t *len_p,
                                             char *why, size_t len);
/* Called first by each thread braid starts for comm: names it ("braid-" + what) and pins it
 * to comm->thread_cpus when pinning is on. */
void braid_comm_thread_start(struct braid_comm *comm, const char *what);
/* pthread_create with every signal blocked in the new thread (the application's handlers run
 * in its own threads, never in braid's); returns pthread_create's result. */
int braid_thread_create_quiet(pthread_t *t, void *(*fn)(void *), void *arg);
/* Connections for arbitrary pairs, made at init: this rank sends to the nsend ranks send_to[]
 * (into send_arr[rank]) and receives from the nrecv ranks recv_from[] (into recv_arr[rank]);
 * every rank passes its side of the same pair set, and max_in >= any rank's nrecv, equal on
 * every rank. The connections get channel id `channel`, slots of slot_bytes and at most
 * max_slots of them. Collective (bootstrap allgather and barrier). */
braid_result_t braid_comm_connect_pairs(struct braid_comm *c, int channel, braid_conn_t **send_arr,
                                        braid_conn_t **recv_arr, size_t slot_bytes, int max_slots,
                                        const int *send_to, int nsend, const int *recv_from,
                                        int nrecv, int max_in);
/* Init's connection steps (comm_connect.c), in this order: the ring order (ring_order,
 * ring_pos), the channels' rings, the latency algorithms' pairs (p2p_send / p2p_recv); and
 * closing every connection of comm (the send/recv ones of core/p2p.h too) at destroy. */
braid_result_t braid_comm_order_ring(struct braid_comm *c);
braid_result_t braid_comm_connect_rings(struct braid_comm *c);
braid_result_t braid_comm_connect_latency(struct braid_comm *c);
void braid_comm_close_conns(struct braid_comm *c);
/* Deregisters the user registrations still on comm (braid_comm_destroy; register.c). */
void braid_comm_reg_cleanup(struct braid_comm *comm);

/* Host identity of this process: BRAID_HOSTNAME, or hostname + boot id + network namespace.
 * Returns 0, or errno (EMFILE / ENFILE) when the boot id could not be read for lack of file
 * descriptors (the id is then wrong: init fails instead of splitting the host). */
int braid_host_id(char out[BRAID_HOST_ID_BYTES]);
/* The machine (kernel boot id; the host id where it cannot be read); returns as above. */
int braid_machine_id(char out[BRAID_HOST_ID_BYTES]);
/* The inode of this process's PID namespace (unique on the machine while the namespace lives;
 * part of the host id, and of shared-memory segment names); 0 where /proc cannot tell. */
unsigned long long braid_pidns_id(void);

#endif
