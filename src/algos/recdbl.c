/* Recursive doubling all-reduce: log2(n) rounds of pairwise exchange, for small messages.
 *
 * Definitions: n ranks, P = the largest power of two <= n, L = log2(P), rem = n - P. Ranks
 * P..n-1 are the extras; extra e is paired with rank e - P (the fix-up for non-powers of two).
 * The data is cut into loops of one chunk each (channel 0 only); per loop, rank r does:
 *   extra e:        SEND in to e-P; RECV the result from e-P into out
 *   q < P:          [q < rem: RECV_REDUCE_COPY from q+P: out = in op R]
 *                   rounds i = 0..L-1 with partner p = q xor 2^i:
 *                     SEND X to p; RECV_REDUCE_COPY from p: out = lower op upper
 *                   [q < rem: SEND out to q+P]
 * X is the rank's current data: its input until the first reduction, then out (IN_OUT).
 * After round i, rank q holds the reduction over the ranks (with their extras) that agree with
 * q on bits above i. Operand order is fixed: the half whose bit i is 0 (and q before q+P in
 * the fix-up) is always the left operand (SWAP when that is the local data), so both partners
 * compute the same expression from bit-identical operands and every rank ends bit-identical.
 * Only the last round applies avg's division (NOFINAL before it); the extras receive the
 * divided result. Each rank sends and receives 2 + 2L messages per loop at most. */
#include "algos/plan.h"

static int pow2_floor(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

static int log2_int(int p)
{
    int l = 0;
    while ((1 << l) < p)
        l++;
    return l;
}

void braid_recdbl_begin(braid_plan_cursor_t *c)
{
    int n = c->p.nranks, r = c->p.rank, P = pow2_floor(n), L = log2_int(P);
    if (r >= P)
        c->nsteps = 2;
    else
        c->nsteps = 2 * L + (r < n - P ? 2 : 0);
}

void braid_recdbl_step(const braid_plan_cursor_t *c, braid_step_t *s)
{
    int n = c->p.nranks, r = c->p.rank, k = c->k, P = pow2_floor(n), L = log2_int(P);
    s->in_off = s->out_off = c->ch_off + c->loop_off;
    s->count = c->loop_chunk;
    if (r >= P) {
        s->prim = k == 0 ? BRAID_PRIM_SEND : BRAID_PRIM_RECV;
        s->send_peer = s->recv_peer = r - P;
        return;
    }
    int extra = r < n - P, j = k - extra;
    if (extra && k == 0) {
        s->prim = BRAID_PRIM_RECV_REDUCE_COPY;
        s->recv_peer = r + P;
        s->flags = BRAID_STEP_SWAP | BRAID_STEP_NOFINAL;
        return;
    }
    if (j >= 2 * L) {
        s->prim = BRAID_PRIM_SEND;
        s->send_peer = r + P;
        s->flags = BRAID_STEP_IN_OUT;
        return;
    }
    int round = j / 2, partner = r ^ (1 << round);
    s->send_peer = s->recv_peer = partner;
    if (extra || round > 0) s->flags |= BRAID_STEP_IN_OUT;
    if (j % 2 == 0) {
        s->prim = BRAID_PRIM_SEND;
        return;
    }
    s->prim = BRAID_PRIM_RECV_REDUCE_COPY;
    if (!(r & (1 << round))) s->flags |= BRAID_STEP_SWAP; /* local data is the lower half */
    if (round < L - 1) s->flags |= BRAID_STEP_NOFINAL;
}

int braid_recdbl_peers(int nranks, int rank, int *peers, int max)
{
    int P = pow2_floor(nranks), np = 0;
    if (nranks < 2) return 0;
    if (rank >= P) {
        if (max > 0) peers[0] = rank - P;
        return 1;
    }
    for (int b = 1; b < P; b *= 2, np++)
        if (np < max) peers[np] = rank ^ b;
    if (rank < nranks - P) {
        if (np < max) peers[np] = rank + P;
        np++;
    }
    return np;
}
