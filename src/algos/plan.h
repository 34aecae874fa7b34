/* Plans: an algorithm turns (collective, count, dtype size, nranks, rank, chunking) into a
 * sequence of steps per channel. Each step is one engine primitive on one chunk. Plans are pure
 * functions of their parameters: no transport, no memory, exhaustively unit-tested.
 *
 * Primitive semantics (in = input + in_off, out = output + out_off, R = the chunk received
 * from the channel's recv peer, S = the send slot to the channel's send peer, all `count`
 * elements; "final" applies avg's division by nranks):
 *   SEND                   S = in
 *   RECV                   out = R
 *   COPY                   out = final(in)               (no communication)
 *   COPY_SEND              out = in, S = in
 *   RECV_REDUCE_SEND       S = R op in
 *   RECV_REDUCE_COPY       out = final(R op in)
 *   RECV_REDUCE_COPY_SEND  out = S = final(R op in)
 *   RECV_COPY_SEND         out = S = R
 * Every message, including empty ones, is sent, so both ends of a connection agree on the
 * number of messages whatever the chunking.
 *
 * Peers: a step receives from recv_peer and sends to send_peer; BRAID_PEER_RING (the default
 * every plan gets) means the channel's ring neighbours (comm->ring[ch].recv / .send), any other
 * value a rank whose point-to-point connection the communicator made at init (comm->p2p_*).
 * Flags modify the primitive:
 *   BRAID_STEP_IN_OUT   `in` is read from the output buffer (data accumulated by earlier steps)
 *   BRAID_STEP_SWAP     reductions compute in op R instead of R op in (a fixed operand order
 *                       on every rank: bit-identical results even for NaN-sensitive min/max)
 *   BRAID_STEP_NOFINAL  a reduction that is not the last one: avg only sums */
#ifndef BRAID_ALGOS_PLAN_H
#define BRAID_ALGOS_PLAN_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    BRAID_PRIM_SEND = 0,
    BRAID_PRIM_RECV,
    BRAID_PRIM_COPY,
    BRAID_PRIM_COPY_SEND,
    BRAID_PRIM_RECV_REDUCE_SEND,
    BRAID_PRIM_RECV_REDUCE_COPY,
    BRAID_PRIM_RECV_REDUCE_COPY_SEND,
    BRAID_PRIM_RECV_COPY_SEND,
    BRAID_PRIM_COUNT
} braid_prim_t;

const char *braid_prim_name(braid_prim_t p);
/* Whether a primitive receives / sends / reads the input / writes the output. */
int braid_prim_recvs(braid_prim_t p);
int braid_prim_sends(braid_prim_t p);
int braid_prim_reads_in(braid_prim_t p);
int braid_prim_writes_out(braid_prim_t p);

#define BRAID_PEER_RING (-1)
#define BRAID_STEP_IN_OUT 0x1
#define BRAID_STEP_SWAP 0x2
#define BRAID_STEP_NOFINAL 0x4

typedef struct {
    uint8_t prim;
    uint8_t flags; /* BRAID_STEP_* */
    int send_peer; /* BRAID_PEER_RING or a rank */
    int recv_peer;
    size_t in_off;  /* element offset into the input buffer */
    size_t out_off; /* element offset into the output buffer */
    size_t count;   /* elements */
} braid_step_t;

/* Parameters shared by every plan. For allreduce/broadcast/reduce `count` is the total
 * count; for reduce_scatter it is recvcount (per rank) and for allgather sendcount. */
/* Plan families (the values of braid_algo_t in algos/algo.h that the engine runs). */
#define BRAID_PLAN_RING 0
#define BRAID_PLAN_RECDBL 2
#define BRAID_PLAN_TREE 3
#define BRAID_PLAN_DIRECT 4 /* not a step plan: algos/direct.c (named in mismatch messages) */
#define BRAID_PLAN_HIER 5   /* not a step plan: stages on sub-communicators (algos/hier.c) */

typedef struct {
    int coll;         /* braid_coll_t */
    int algo;         /* BRAID_PLAN_*; 0 (the ring) when not set */
    int nranks, rank; /* ring plans: rank is this rank's ring position; others: the rank */
    int root;         /* broadcast / reduce root (a rank), else -1 */
    const int *order; /* ring plans: order[pos] = rank at ring position pos; NULL = identity.
                       * Reduce-scatter/all-gather blocks and the chain root map through it. */
    size_t count;
    size_t chunk;  /* max elements per step (>= 1) */
    int nchannels; /* >= 1 */
} braid_plan_params_t;

/* A resumable iterator over one channel's steps. */
typedef struct {
    braid_plan_params_t p;
    int channel;
    size_t ch_off, ch_count; /* this channel's slice of the (per-rank) count */
    size_t loop_off;         /* start of the current loop within the slice */
    size_t loop_chunk;       /* elements per block in the current loop */
    int k;                   /* step index within the loop */
    int nsteps;              /* steps per loop (recdbl) */
    int done;
} braid_plan_cursor_t;

/* The elements of channel `channel`'s slice of count in a ring plan (channels split count
 * evenly; with count < nchannels some slices are empty). */
static inline size_t braid_plan_channel_count(size_t count, int nchannels, int channel)
{
    size_t nch = nchannels < 1 ? 1 : (size_t)nchannels;
    return count * (size_t)(channel + 1) / nch - count * (size_t)channel / nch;
}

/* Starts the iterator of `channel` (0..nchannels-1). */
void braid_plan_begin(braid_plan_cursor_t *c, const braid_plan_params_t *p, int channel);
/* Writes the next step and returns 1, or returns 0 when the channel has no more steps. */
int braid_plan_next(braid_plan_cursor_t *c, braid_step_t *s);

/* Ring neighbours of a rank for a chain/ring collective. */
static inline int braid_ring_next(int rank, int n)
{
    return (rank + 1) % n;
}
static inline int braid_ring_prev(int rank, int n)
{
    return (rank + n - 1) % n;
}

/* Recursive doubling all-reduce (recdbl.c), channel 0 only (other channels have no steps).
 * P = the largest power of two <= nranks; ranks >= P are "extras", each paired with rank - P.
 * Used by braid_plan_begin/next when p->algo == BRAID_PLAN_RECDBL. */
void braid_recdbl_begin(braid_plan_cursor_t *c);
void braid_recdbl_step(const braid_plan_cursor_t *c, braid_step_t *s);
/* The peers rank talks to (each both ways) in recursive doubling: writes up to max ranks,
 * returns how many there are (at most 1 + log2(nranks)). */
int braid_recdbl_peers(int nranks, int rank, int *peers, int max);

/* Binomial-tree broadcast and reduce (tree.c), channel 0 only, for any root; used by
 * braid_plan_begin/next when p->algo == BRAID_PLAN_TREE. Its edges join ranks whose distance
 * mod nranks is a power of two; the communicator connects them for nranks <= this. */
#define BRAID_TREE_MAX_RANKS 64
void braid_tree_begin(braid_plan_cursor_t *c);
void braid_tree_step(const braid_plan_cursor_t *c, braid_step_t *s);
/* Every peer the latency plans (recursive doubling and, for nranks <= BRAID_TREE_MAX_RANKS,
 * the trees) need, each both ways: writes up to max ranks, returns how many there are. */
int braid_p2p_peers(int nranks, int rank, int *peers, int max);

#endif
