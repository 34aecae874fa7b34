/* Algorithm selection (select.c) and the algorithms composed from sub-communicators
 * (hier.c). Every collective goes through braid_algo_execute, which picks an algorithm from
 * BRAID_ALGO or the cost model and runs it; the ring (engine.c over comm->ring) is the default
 * and the fallback whenever another algorithm does not apply to a shape.
 *
 * Determinism: the choice depends only on the collective's arguments (equal on every rank by
 * contract), the host grouping (from allgathered host ids) and constants (built in, or rank
 * 0's tuning file / init measurement, and the fewest cores of any rank, all shared by bootstrap
 * allgathers); at init every rank allgathers its choices for every collective and size and
 * checks they agree with rank 0's, so a rank that would choose differently (a different
 * BRAID_ALGO, say) fails init instead of hanging. */
#ifndef BRAID_ALGOS_ALGO_H
#define BRAID_ALGOS_ALGO_H

#include "core/comm.h"
#include "topo/topo.h"

#include <pthread.h>
#include <stdatomic.h>

typedef enum {
    BRAID_ALGO_AUTO = -1,
    BRAID_ALGO_RING = 0,
    BRAID_ALGO_HIER = 1,
    BRAID_ALGO_RECDBL = 2,
    BRAID_ALGO_TREE = 3,
    BRAID_ALGO_DIRECT = 4, /* single-copy shared memory on one host (direct.c) */
    BRAID_ALGO_COUNT = 5
} braid_algo_t;

const char *braid_algo_name(int algo);
/* "" = automatic; otherwise one of ring, hier, recdbl, tree, direct (any case); an unknown name is
 * BRAID_ERR_INVALID_ARG with a message listing the valid ones. */
braid_result_t braid_algo_parse(const char *name, int *algo_p);

/* ---- the cost model (pure) ---------------------------------------------------------------- */
typedef struct {
    double alpha_us; /* latency of one message */
    double gbps;     /* bandwidth, GB/s (1e9 bytes per second) */
} braid_link_model_t;

typedef struct {
    int nranks, nhosts;
    int min_local, max_local; /* ranks per host */
    int ring_crossings;       /* ring edges between hosts (rank-order ring) */
    int ring_host_out;        /* most ring edges leaving one host (they share its NIC) */
    braid_link_model_t intra, inter;
    braid_link_model_t copy; /* a local memcpy (bandwidth only) */
    double launch_us;        /* fixed cost of one (sub-)collective */
    double oversub_us;       /* extra latency per step per rank beyond the cores of a machine */
    int cores;        /* cpus the ranks of a machine may run on, their bindings together (the fewest
                       * of any machine; 0 = unknown: not oversubscribed) */
    int host_ranks;   /* ranks on the busiest machine (hosts that are namespaces or containers of
                       * one machine share its cpus; sub-models keep their parent's) */
    int nslots;       /* chunks in flight per connection (how deep consecutive calls overlap) */
    size_t p2p_chunk; /* bytes per message of the latency algorithms */
    int recdbl_intra_rounds; /* recursive-doubling rounds whose partners share a host */
    int nic_share;           /* ranks of the busiest host that use its NIC at once */
    double net_overlap;      /* 1: the network's queue absorbs a call's bytes (token-bucket shaped
                              * links), so they overlap the latency path instead of adding to it */
    int direct;              /* the direct shared-memory segments are mapped (one host) */
    int net_only;            /* BRAID_TRANSPORT=tcp or rdma: no sub-comm maps direct segments */
    size_t direct_block;     /* their block bytes */
    int direct_block_auto;   /* BRAID_DIRECT_BLOCK=auto (1 MiB at every size: sub-models keep it) */
    braid_link_model_t direct_link; /* one synchronisation (alpha, per peer) and busbw */
} braid_model_t;

/* Default link parameters: shm from perf/results/2026-11-29-shm (2 ranks: ~0.4 us per ring
 * step, ~5 GB/s bus bandwidth in place), tcp a 10 GbE link (no recorded measurement yet). */
#define BRAID_MODEL_SHM_ALPHA_US 0.5
#define BRAID_MODEL_SHM_GBPS 5.0
#define BRAID_MODEL_NET_ALPHA_US 25.0
#define BRAID_MODEL_NET_GBPS 1.1
#define BRAID_MODEL_LAUNCH_US 2.0
#define BRAID_MODEL_OVERSUB_US 1.0
#define BRAID_MODEL_NSLOTS 8
#define BRAID_MODEL_COPY_GBPS 9.0 /* one-thread memcpy, shared/notes/machine-facts.md */
/* Direct shared memory (algos/direct.c): a synchronisation costs about one cache-line transfer
 * per peer; its bus bandwidth (bytes per rank x 2(n-1)/n over time) at the ring's when
 * calibrated on the recorded shm runs, see select.c. */
#define BRAID_MODEL_DIRECT_ALPHA_US 0.15
#define BRAID_MODEL_DIRECT_GBPS 8.0

/* Recomputes the model's ring crossings for the ring order actually used (NULL = rank order). */
void braid_model_set_ring(braid_model_t *m, const braid_topo_t *t, const int *order);
/* Fills m from a host grouping (and the rank-order ring) with the default link parameters. */
void braid_model_init(braid_model_t *m, const braid_topo_t *t);
/* BRAID_TRANSPORT=tcp or rdma (name) makes links within a host network links too: the model
 * then costs them as such. Returns 1 when it changed m. */
int braid_model_force_transport(braid_model_t *m, const char *name);
/* Whether algo is implemented and applies to (coll, count elements of elem_size bytes). */
int braid_algo_applies(int algo, int coll, size_t count, const braid_model_t *m);
/* Estimated microseconds of algo for coll on `bytes` (the per-rank buffer of allreduce);
 * a negative value if it does not apply. */
double braid_model_time(int algo, int coll, size_t bytes, size_t count, const braid_model_t *m);
/* The cheapest applicable algorithm (ties: the lower id; the ring always applies). */
int braid_model_choose(int coll, size_t bytes, size_t count, const braid_model_t *m);
/* Tuning files (tune.c): overrides m's link constants from `key value` lines (see tune.c);
 * m is untouched on failure, which names the file, line and key. */
braid_result_t braid_tuning_read(const char *path, braid_model_t *m);
/* Collective at init: measures the slowest link (the network with several hosts, else shm)
 * with all-reduces over c's connections and sets its constants in m (see tune.c). */
struct braid_algo_state;
braid_result_t braid_tuning_measure(struct braid_comm *c, struct braid_algo_state *st, int reps);
/* Rounds of recursive doubling (log2 P, plus 2 for the fix-up when n is not a power of two P)
 * or levels of the binomial tree (plus 1) over n ranks. */
int braid_model_rounds(int algo, int n);
/* Oversubscription penalty per step (select.c). */
double braid_model_step_penalty_us(const braid_model_t *m);
/* Writes m's constants in the format braid_tuning_read reads, after a `# comment` line. */
void braid_tuning_write(FILE *f, const braid_model_t *m, const char *comment);
/* Writes the model's table (allreduce, 8 B .. 256 MiB, every algorithm and the choice). */
void braid_model_print(const braid_model_t *m, FILE *f);

/* ---- per-communicator state ----------------------------------------------------------------- */
#define BRAID_PICK_CACHE 64
typedef struct braid_algo_state {
    braid_topo_t topo;
    braid_model_t model;
    int forced;                      /* braid_algo_t, BRAID_ALGO_AUTO if none */
    uint64_t runs[BRAID_ALGO_COUNT]; /* collectives each algorithm ran (tests, logs) */
    /* Hierarchical algorithms: made with braid_comm_split on first use. */
    int hier_ready;
    struct braid_comm *intra; /* ranks of this host, ranked by parent rank */
    struct braid_comm *inter; /* ranks with this rank's local index, one per host */
    int failed_in; /* hier: the sub-communicator a failure came from (1 intra, 2 inter) */
    void *scratch; /* hier reduce-scatter's packed input / reduce's partial, kept when small */
    size_t scratch_bytes;
    /* intra and inter are published (and taken back) under sub_lock: braid_algo_comm_abort may
     * run on another thread while hier_setup makes them */
    pthread_mutex_t sub_lock;
    /* hier: the parent's call whose stages run now, which the stages' waits check for a peer in
     * another call (hier.c, hier_watch); its tail on the parent's ring (has_part) */
    const braid_op_args_t *call;
    braid_op_args_t call_part;
    int has_part;
    uint32_t call_seq;
    _Atomic int watching; /* a thread runs the check (the intra and inter stages may both wait) */
    /* The last choices, direct-mapped by (coll, count, element size): an 8 B all-reduce spent a
     * quarter of its time costing every algorithm again (select.c, pick). Cleared whenever the
     * model changes (braid_algo_pick_forget). */
    _Atomic uint64_t pick_cache[BRAID_PICK_CACHE];
} braid_algo_state_t;

/* Forgets the cached choices (after st->model changed). */
void braid_algo_pick_forget(braid_algo_state_t *st);

/* At the end of init (collective: one bootstrap allgather to check the choices agree). */
braid_result_t braid_algo_comm_init(struct braid_comm *c);
/* From braid_comm_abort: aborts the sub-communicators too. */
void braid_algo_comm_abort(struct braid_comm *c);
/* From comm_free: destroys the sub-communicators and the state. */
void braid_algo_comm_free(struct braid_comm *c);
/* Runs one validated collective (not barrier) with the chosen algorithm. */
braid_result_t braid_algo_execute(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq);

/* hier.c: runs collective a (number seq) with the hierarchical algorithm for its collective
 * (below); creates the sub-communicators on first use (collective over c). By collective:
 *   all-reduce: intra-host reduce-scatter, inter-host all-reduce among equal local indices,
 *     intra-host all-gather; the tail that does not divide by the local size goes over the
 *     flat ring;
 *   broadcast: inter-host broadcast among the leaders (the ranks with the root's local index,
 *     or local rank 0 of every host when some host has no such index: then the root's host
 *     first broadcasts within itself), then each host broadcasts from its leader (any shape);
 *   reduce: the broadcast mirrored (any shape): each host reduces within itself to its leader,
 *     the leaders reduce across hosts to the root's host, and when the leaders are local rank 0
 *     rather than the root's local index, the root's host then reduces to the root; only the
 *     root's recvbuf is used;
 *   reduce-scatter (equal ranks per host): the input's blocks packed by (local index, host),
 *     intra-host reduce-scatter of H blocks per rank, inter-host reduce-scatter among equal
 *     local indices: the network carries (n - L) blocks per host instead of the ring's (n - 1).
 */
braid_result_t braid_hier_run(struct braid_comm *c, braid_algo_state_t *st,
                              const braid_op_args_t *a, uint32_t seq);
/* Copies the parent's model constants into the hier sub-communicators' models. */
void braid_hier_share_model(braid_algo_state_t *st);
/* Error text from a hier sub-communicator with every "rank N" (N < nmap) renamed to
 * "rank map[N]", marked "[hier] " in front; the text after an earlier mark is copied as is
 * (without the mark). Returns the length written to out (len > 0). */
size_t braid_hier_rename(const char *in, const int *map, int nmap, char *out, size_t len);

#endif
