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

typedef enum {
    BRAID_COLL_ALLREDUCE = 1,
    BRAID_COLL_BROADCAST = 2,
    BRAID_COLL_REDUCE = 3,
    BRAID_COLL_REDUCE_SCATTER = 4,
    BRAID_COLL_ALLGATHER = 5,
    BRAID_COLL_BARRIER = 6
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
    int premul;      /* PreMulSum (core/redop.h): op is then BRAID_SUM for the kernels */
    uint64_t scalar; /* its scalar, one element of dtype */
} braid_op_args_t;

struct braid_request {
    braid_op_args_t args;
    struct braid_comm *comm;
    struct braid_request *next;
    _Atomic int done;
    braid_result_t result;
    char errmsg[512];
};

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
    /* braid's own threads (tcp progress, non-blocking worker) run on thread_cpus when
     * pin_threads (BRAID_THREAD_AFFINITY, resolved at init from the rank's cpuset). */
    int pin_threads;
    cpu_set_t thread_cpus;

    /* Tuning, read from the environment at init. */
    double timeout_s;
    int nchannels;
    size_t chunk_bytes;
    int nslots;
    int spin_us;
    int yield_us;                       /* then sched_yield() for this long before sleeping */
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
    void *tcp_state;                     /* owned by transport/tcp*.c (listener, progress thread) */
    struct braid_algo_state *algo_state; /* owned by algos/select.c (topology, model, sub-comms) */
    struct braid_redop_table *redops;    /* owned by core/redop.c (created ops) */
    braid_boot_addr_t boot_addr; /* root address and job secret (tcp authenticates with it) */
    uint32_t seq;                /* collectives started */

    _Atomic int aborted;
    _Atomic int error; /* sticky braid_result_t, 0 = none */
    char errmsg[512];
    pthread_mutex_t err_lock;

    /* Non-blocking operations: run in order by a worker thread started on first use. */
    pthread_mutex_t q_lock;
    pthread_cond_t q_cond;
    struct braid_request *q_head, *q_tail;
    int q_pending; /* queued or running */
    int worker_started, worker_stop;
    pthread_t worker;
};

#define BRAID_COMM_MAGIC 0x62726169645f636dULL

/* Validates a communicator handle (NULL, never created, destroyed): 0 or an error naming it. */
braid_result_t braid_comm_check(struct braid_comm *comm);
/* Records the first asynchronous error of comm (sticky) and sets the thread's message. */
braid_result_t braid_comm_set_error(struct braid_comm *comm, braid_result_t res, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));
/* Tells every peer this rank failed, wakes local waiters. */
void braid_comm_fail_peers(struct braid_comm *comm, braid_result_t code, const char *why);

/* The transport this rank uses with peer (BRAID_TRANSPORT, else shm on the same host, else
 * the network transport); an error when none can reach it. */
braid_result_t braid_comm_pick_transport(struct braid_comm *comm, int peer,
                                         const braid_transport_t **t_p);

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
/* Deregisters the user registrations still on comm (braid_comm_destroy; register.c). */
void braid_comm_reg_cleanup(struct braid_comm *comm);

/* Host identity of this process: BRAID_HOSTNAME, or hostname + boot id + network namespace. */
void braid_host_id(char out[BRAID_HOST_ID_BYTES]);
/* The machine (kernel boot id; the host id where it cannot be read). */
void braid_machine_id(char out[BRAID_HOST_ID_BYTES]);

#endif
