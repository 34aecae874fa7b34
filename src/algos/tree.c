/* Binomial-tree broadcast and reduce: log2(n) latency for small messages (the chain takes n-1).
 *
 * Definitions: n ranks, root, relative rank v = (r - root) mod n. The parent of v > 0 is v with
 * its lowest set bit cleared; the children of v are v + 2^k for every 2^k below v's lowest set
 * bit (every 2^k for the root) with v + 2^k < n. A child and its parent differ by a power of
 * two, so the tree of every root uses only the pairs (a, (a +- 2^k) mod n), which the
 * communicator connects at init (braid_p2p_peers). The data is cut into loops of one chunk each
 * (channel 0 only); per loop, rank r does:
 *   broadcast  root: COPY_SEND to its first child, SEND to the others;
 *              others: RECV from the parent (a leaf), or RECV_COPY_SEND to the first child and
 *              SEND (IN_OUT) to the others. Children go largest subtree first.
 *   reduce     a leaf: SEND its input to the parent;
 *              others: RECV_REDUCE_COPY from each child, smallest subtree first, as
 *              "local op received" (SWAP; IN_OUT after the first), then (not the root) SEND
 *              the accumulated chunk (IN_OUT) to the parent.
 * Rank v's accumulated data is therefore the left fold over relative ranks v, v+1, ..., v +
 * subtree - 1 in that order: one fixed expression whatever the timing. Only the root's last
 * reduction applies avg's division (NOFINAL elsewhere). Non-root ranks of a reduce accumulate
 * in the output buffer, which the engine replaces by scratch memory there (the caller's may be
 * NULL). */
#include "algos/plan.h"
#include "core/comm.h"

#define TREE_MAX_KIDS 32

static int lowbit(int v, int n)
{
    if (v == 0) {
        int b = 1;
        while (b < n)
            b *= 2;
        return b;
    }
    return v & -v;
}

/* Children of relative rank v, ascending (smallest subtree first); returns how many. */
static int tree_kids(int n, int v, int *kids)
{
    int m = 0, lb = lowbit(v, n);
    for (int b = 1; b < lb && v + b < n && m < TREE_MAX_KIDS; b *= 2)
        kids[m++] = v + b;
    return m;
}

static int to_rank(int v, int root, int n)
{
    return (v + root) % n;
}

static int rel(const braid_plan_params_t *p)
{
    int root = p->root >= 0 && p->root < p->nranks ? p->root : 0;
    return (p->rank - root + p->nranks) % p->nranks;
}

void braid_tree_begin(braid_plan_cursor_t *c)
{
    int kids[TREE_MAX_KIDS];
    int n = c->p.nranks, v = rel(&c->p), m = tree_kids(n, v, kids);
    if (c->p.coll == BRAID_COLL_BROADCAST)
        c->nsteps = m > 0 ? m : 1;
    else
        c->nsteps = m + (v != 0);
}

void braid_tree_step(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int kids[TREE_MAX_KIDS];
    int n = c->p.nranks, v = rel(&c->p), k = c->k, m = tree_kids(n, v, kids);
    int root = c->p.root >= 0 && c->p.root < n ? c->p.root : 0;
    int parent = to_rank(v & (v - 1), root, n);
    s->in_off = s->out_off = c->ch_off + c->loop_off;
    s->count = c->loop_chunk;
    if (c->p.coll == BRAID_COLL_BROADCAST) {
        if (m == 0) {
            s->prim = BRAID_PRIM_RECV;
            s->recv_peer = parent;
            return;
        }
        s->send_peer = to_rank(kids[m - 1 - k], root, n); /* largest subtree first */
        if (k > 0) {
            s->prim = BRAID_PRIM_SEND;
            s->flags = BRAID_STEP_IN_OUT;
        } else if (v == 0) {
            s->prim = BRAID_PRIM_COPY_SEND;
        } else {
            s->prim = BRAID_PRIM_RECV_COPY_SEND;
            s->recv_peer = parent;
        }
        return;
    }
    if (k == m) { /* not the root: pass the subtree's reduction up */
        s->prim = BRAID_PRIM_SEND;
        s->send_peer = parent;
        if (m > 0) s->flags = BRAID_STEP_IN_OUT;
        return;
    }
    s->prim = BRAID_PRIM_RECV_REDUCE_COPY;
    s->recv_peer = to_rank(kids[k], root, n);
    s->flags = BRAID_STEP_SWAP;
    if (k > 0) s->flags |= BRAID_STEP_IN_OUT;
    if (v != 0 || k < m - 1) s->flags |= BRAID_STEP_NOFINAL;
}

static int add_peer(int *peers, int np, int max, int peer, int rank)
{
    if (peer == rank) return np;
    for (int i = 0; i < np && i < max; i++)
        if (peers[i] == peer) return np;
    if (np < max) peers[np] = peer;
    return np + 1;
}

int braid_p2p_peers(int nranks, int rank, int *peers, int max)
{
    int tmp[BRAID_TREE_MAX_RANKS];
    int nr = braid_recdbl_peers(nranks, rank, tmp, BRAID_TREE_MAX_RANKS), np = 0;
    for (int i = 0; i < nr && i < BRAID_TREE_MAX_RANKS; i++)
        np = add_peer(peers, np, max, tmp[i], rank);
    if (nranks > BRAID_TREE_MAX_RANKS) return np;
    for (int b = 1; b < nranks; b *= 2) {
        np = add_peer(peers, np, max, (rank + b) % nranks, rank);
        np = add_peer(peers, np, max, (rank - b % nranks + nranks) % nranks, rank);
    }
    return np;
}
