/* Plans checked without any transport: every rank's step sequence is run in one process by a
 * simulator that moves messages between ring neighbours (and, for steps naming a peer, between
 * point-to-point pairs) through bounded FIFOs (as the engine's transports do). Each element
 * carries the set of ranks whose contribution reached it (one byte per rank, so a double
 * contribution shows), the sum of the element indices those contributions came from (so a
 * misplaced block shows), an order-sensitive hash of the reduction expression (equal on every
 * rank = bit-identical results for any non-associative, non-commutative op) and how many
 * final (avg-dividing) reductions it went through. The simulator also detects deadlock: no
 * rank able to move while some have steps left. */
#include "algos/plan.h"
#include "core/comm.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t contrib; /* byte r counts rank r's contributions */
    uint64_t idxsum;  /* sum of the source indices */
    uint64_t expr;    /* hash of the expression tree: leaf (rank, index), then op(a, b) */
    uint64_t finals;  /* final reductions applied (avg divides once: exactly 1 at the end) */
} elem_t;

#define NSLOTS 3
#define MAXN 8

typedef struct {
    elem_t *data[NSLOTS];
    size_t count[NSLOTS];
    int head, tail; /* messages posted / consumed */
} fifo_t;

typedef struct {
    braid_plan_cursor_t cur;
    braid_step_t step;
    int have, done;
    elem_t *in, *out;
    unsigned char *writes; /* per output element: times a step wrote it */
} rank_t;

static elem_t *alloc_elems(size_t n)
{
    return calloc(n ? n : 1, sizeof(elem_t));
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

/* d = a op b; final marks the reduction that applies avg's division. Called with d aliasing a
 * or b exactly, as the kernels allow. */
static void combine(elem_t *d, const elem_t *a, const elem_t *b, size_t n, int final)
{
    for (size_t i = 0; i < n; i++) {
        cr_assert(a[i].finals == 0 && b[i].finals == 0, "reduces an already final value");
        elem_t e = {.contrib = a[i].contrib + b[i].contrib,
                    .idxsum = a[i].idxsum + b[i].idxsum,
                    .expr = mix64(a[i].expr * 3 + mix64(b[i].expr + 0x9e3779b97f4a7c15ull)),
                    .finals = (uint64_t)(final != 0)};
        d[i] = e;
    }
}

/* Whether rank r may talk to peer directly in plan family algo (the comm connects those). */
static int connected(int algo, int n, int r, int peer)
{
    int peers[32];
    int np = algo == BRAID_PLAN_RECDBL ? braid_recdbl_peers(n, r, peers, 32)
             : algo == BRAID_PLAN_TREE ? braid_p2p_peers(n, r, peers, 32)
                                       : 0;
    for (int i = 0; i < np; i++)
        if (peers[i] == peer) return 1;
    return 0;
}

/* Runs coll with plan family algo for n ranks; returns each rank's output in outs[r] (caller
 * frees). */
/* Ring order used by the simulator for ring plans (NULL = rank order): the simulator's index
 * is then the ring position, holding rank sim_order[pos]'s data. */
static const int *sim_order;

static void simulate_algo(int algo, int coll, int n, int root, size_t count, size_t chunk, int nch,
                          size_t in_len, size_t out_len, elem_t **outs)
{
    const int *order = algo == BRAID_PLAN_RING ? sim_order : NULL;
    rank_t rk[MAXN];
    fifo_t fifo[MAXN][BRAID_MAX_CHANNELS]; /* fifo[r][c]: from r to r+1 on channel c */
    fifo_t pfifo[MAXN][MAXN];              /* pfifo[a][b]: point-to-point from a to b */
    memset(fifo, 0, sizeof(fifo));
    memset(pfifo, 0, sizeof(pfifo));
    for (int r = 0; r < n; r++) {
        rk[r].in = alloc_elems(in_len);
        rk[r].out = alloc_elems(out_len);
        rk[r].writes = calloc(out_len + 1, 1);
        cr_assert(rk[r].writes);
        int who = order ? order[r] : r;
        for (size_t i = 0; i < in_len; i++) {
            rk[r].in[i].contrib = 1ull << (8 * who);
            rk[r].in[i].idxsum = i;
            rk[r].in[i].expr = mix64(((uint64_t)who << 40) + i + 1);
        }
    }
    braid_plan_cursor_t cur[MAXN][BRAID_MAX_CHANNELS];
    braid_step_t st[MAXN][BRAID_MAX_CHANNELS];
    int have[MAXN][BRAID_MAX_CHANNELS] = {{0}}, done[MAXN][BRAID_MAX_CHANNELS] = {{0}};
    for (int r = 0; r < n; r++)
        for (int c = 0; c < nch; c++) {
            braid_plan_params_t p = {.coll = coll,
                                     .algo = algo,
                                     .nranks = n,
                                     .rank = r,
                                     .root = root,
                                     .count = count,
                                     .chunk = chunk,
                                     .nchannels = nch,
                                     .order = order};
            braid_plan_begin(&cur[r][c], &p, c);
        }
    for (;;) {
        int moved = 0, left = 0;
        for (int r = 0; r < n; r++)
            for (int c = 0; c < nch; c++) {
                if (done[r][c]) continue;
                if (!have[r][c]) {
                    if (!braid_plan_next(&cur[r][c], &st[r][c])) {
                        done[r][c] = 1;
                        moved = 1;
                        continue;
                    }
                    have[r][c] = 1;
                }
                left = 1;
                braid_step_t *s = &st[r][c];
                fifo_t *rf = &fifo[(r + n - 1) % n][c], *sf = &fifo[r][c];
                braid_prim_t p = s->prim;
                if (braid_prim_recvs(p) && s->recv_peer != BRAID_PEER_RING) {
                    cr_assert(connected(algo, n, r, s->recv_peer),
                              "n=%d rank %d receives from unconnected rank %d", n, r, s->recv_peer);
                    rf = &pfifo[s->recv_peer][r];
                }
                if (braid_prim_sends(p) && s->send_peer != BRAID_PEER_RING) {
                    cr_assert(connected(algo, n, r, s->send_peer),
                              "n=%d rank %d sends to unconnected rank %d", n, r, s->send_peer);
                    sf = &pfifo[r][s->send_peer];
                }
                if (braid_prim_recvs(p) && rf->head == rf->tail) continue;
                if (braid_prim_sends(p) && sf->head - sf->tail == NSLOTS) continue;
                elem_t *R = NULL;
                if (braid_prim_recvs(p)) {
                    int slot = rf->tail % NSLOTS;
                    cr_assert_eq(rf->count[slot], s->count,
                                 "n=%d rank %d: received %zu elements, step wants %zu", n, r,
                                 rf->count[slot], s->count);
                    R = rf->data[slot];
                }
                if (braid_prim_reads_in(p))
                    cr_assert_leq(s->in_off + s->count,
                                  s->flags & BRAID_STEP_IN_OUT ? out_len : in_len,
                                  "n=%d rank %d reads past input", n, r);
                if (braid_prim_writes_out(p)) {
                    cr_assert_leq(s->out_off + s->count, out_len, "n=%d rank %d writes past output",
                                  n, r);
                    /* Ring plans write each output element at most once per call: the engine
                     * relies on it to send output ranges by reference (send_post_ref), a range
                     * once sent is never rewritten during the call. */
                    for (size_t i = 0; algo == BRAID_PLAN_RING && i < s->count; i++)
                        cr_assert_eq(rk[r].writes[s->out_off + i]++, 0,
                                     "coll %d n=%d rank %d writes output element %zu twice", coll,
                                     n, r, s->out_off + i);
                }
                elem_t *in = (s->flags & BRAID_STEP_IN_OUT ? rk[r].out : rk[r].in) + s->in_off;
                elem_t *out = rk[r].out + s->out_off;
                elem_t *S = alloc_elems(s->count);
                /* R op in, or in op R for SWAP */
                const elem_t *x = s->flags & BRAID_STEP_SWAP ? in : R;
                const elem_t *y = s->flags & BRAID_STEP_SWAP ? R : in;
                int fin = !(s->flags & BRAID_STEP_NOFINAL);
                switch (p) {
                case BRAID_PRIM_SEND:
                    memcpy(S, in, s->count * sizeof(elem_t));
                    break;
                case BRAID_PRIM_RECV:
                    memcpy(out, R, s->count * sizeof(elem_t));
                    break;
                case BRAID_PRIM_COPY:
                    memcpy(out, in, s->count * sizeof(elem_t));
                    break;
                case BRAID_PRIM_COPY_SEND:
                    memcpy(out, in, s->count * sizeof(elem_t));
                    memcpy(S, in, s->count * sizeof(elem_t));
                    break;
                case BRAID_PRIM_RECV_REDUCE_SEND:
                    combine(S, x, y, s->count, 0);
                    break;
                case BRAID_PRIM_RECV_REDUCE_COPY:
                    combine(out, x, y, s->count, fin);
                    break;
                case BRAID_PRIM_RECV_REDUCE_COPY_SEND:
                    combine(out, x, y, s->count, fin);
                    memcpy(S, out, s->count * sizeof(elem_t));
                    break;
                case BRAID_PRIM_RECV_COPY_SEND:
                    memcpy(out, R, s->count * sizeof(elem_t));
                    memcpy(S, R, s->count * sizeof(elem_t));
                    break;
                default:
                    cr_assert_fail("bad primitive %d", p);
                }
                if (braid_prim_recvs(p)) {
                    free(R);
                    rf->tail++;
                }
                if (braid_prim_sends(p)) {
                    int slot = sf->head % NSLOTS;
                    sf->data[slot] = S;
                    sf->count[slot] = s->count;
                    sf->head++;
                } else {
                    free(S);
                }
                have[r][c] = 0;
                moved = 1;
            }
        if (!left) break;
        cr_assert(moved, "deadlock: coll %d n=%d count=%zu chunk=%zu nch=%d", coll, n, count, chunk,
                  nch);
    }
    for (int r = 0; r < n; r++)
        for (int c = 0; c < nch; c++)
            cr_assert_eq(fifo[r][c].head, fifo[r][c].tail, "n=%d: %d unread messages from rank %d",
                         n, fifo[r][c].head - fifo[r][c].tail, r);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            cr_assert_eq(pfifo[a][b].head, pfifo[a][b].tail,
                         "n=%d: %d unread messages from rank %d to %d", n,
                         pfifo[a][b].head - pfifo[a][b].tail, a, b);
    for (int r = 0; r < n; r++) {
        free(rk[r].in);
        free(rk[r].writes);
        outs[order ? order[r] : r] = rk[r].out;
    }
}

static void simulate(int coll, int n, int root, size_t count, size_t chunk, int nch, size_t in_len,
                     size_t out_len, elem_t **outs)
{
    simulate_algo(BRAID_PLAN_RING, coll, n, root, count, chunk, nch, in_len, out_len, outs);
}

static uint64_t all_ranks(int n)
{
    uint64_t m = 0;
    for (int r = 0; r < n; r++)
        m |= 1ull << (8 * r);
    return m;
}

static const size_t counts[] = {0, 1, 2, 7, 8, 13, 64, 97, 1000};
static const size_t chunks[] = {1, 3, 16, 1 << 20};

#define FOR_SHAPES                                                                                 \
    for (int n = 1; n <= MAXN; n++)                                                                \
        for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)                         \
            for (size_t ki = 0; ki < sizeof(chunks) / sizeof(chunks[0]); ki++)                     \
                for (int nch = 1; nch <= 3; nch++)

TestSuite(plan, .timeout = 120);

Test(plan, allreduce_every_rank_gets_every_contribution_once)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        elem_t *outs[MAXN];
        simulate(BRAID_COLL_ALLREDUCE, n, -1, count, chunks[ki], nch, count, count, outs);
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < count; i++) {
                cr_assert_eq(outs[r][i].contrib, all_ranks(n),
                             "n=%d count=%zu chunk=%zu nch=%d rank %d elem %zu: %llx", n, count,
                             chunks[ki], nch, r, i, (unsigned long long)outs[r][i].contrib);
                cr_assert_eq(outs[r][i].idxsum, (uint64_t)n * i);
            }
            free(outs[r]);
        }
    }
}

/* Every rank's every element: all contributions once, the same reduction expression as rank
 * 0's (so bit-identical results), avg's division applied once, by the last reduction. */
static void check_allreduce(const char *algo, int n, size_t count, size_t chunk, int nch,
                            elem_t **outs)
{
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) {
            const elem_t *e = &outs[r][i];
            cr_assert_eq(e->contrib, all_ranks(n),
                         "%s n=%d count=%zu chunk=%zu nch=%d rank %d elem %zu: %llx", algo, n,
                         count, chunk, nch, r, i, (unsigned long long)e->contrib);
            cr_assert_eq(e->idxsum, (uint64_t)n * i, "%s n=%d rank %d elem %zu", algo, n, r, i);
            cr_assert_eq(e->expr, outs[0][i].expr,
                         "%s n=%d count=%zu chunk=%zu: rank %d reduced elem %zu in another order "
                         "than rank 0",
                         algo, n, count, chunk, r, i);
            if (n > 1)
                cr_assert_eq(e->finals, 1, "%s n=%d rank %d elem %zu: %llu final reductions", algo,
                             n, r, i, (unsigned long long)e->finals);
        }
}

Test(plan, allreduce_ranks_reduce_in_one_order)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        elem_t *outs[MAXN];
        simulate(BRAID_COLL_ALLREDUCE, n, -1, count, chunks[ki], nch, count, count, outs);
        check_allreduce("ring", n, count, chunks[ki], nch, outs);
        for (int r = 0; r < n; r++)
            free(outs[r]);
    }
}

Test(plan, recdbl_allreduce_every_shape)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        elem_t *outs[MAXN];
        simulate_algo(BRAID_PLAN_RECDBL, BRAID_COLL_ALLREDUCE, n, -1, count, chunks[ki], nch, count,
                      count, outs);
        check_allreduce("recdbl", n, count, chunks[ki], nch, outs);
        for (int r = 0; r < n; r++)
            free(outs[r]);
    }
}

Test(plan, recdbl_steps_and_peers)
{
    for (int n = 2; n <= MAXN; n++) {
        int P = 1, L = 0;
        while (P * 2 <= n) {
            P *= 2;
            L++;
        }
        for (int r = 0; r < n; r++) {
            braid_plan_params_t p = {.coll = BRAID_COLL_ALLREDUCE,
                                     .algo = BRAID_PLAN_RECDBL,
                                     .nranks = n,
                                     .rank = r,
                                     .count = 5,
                                     .chunk = 5,
                                     .nchannels = 2};
            braid_plan_cursor_t c;
            braid_plan_begin(&c, &p, 1);
            braid_step_t s;
            cr_assert_not(braid_plan_next(&c, &s), "recdbl uses channel 0 only");
            braid_plan_begin(&c, &p, 0);
            int steps = 0, sends = 0;
            while (braid_plan_next(&c, &s)) {
                steps++;
                sends += braid_prim_sends(s.prim);
                cr_assert(s.send_peer != r && s.recv_peer != r);
            }
            int want = r >= P ? 2 : 2 * L + (r < n - P ? 2 : 0);
            cr_assert_eq(steps, want, "n=%d rank %d: %d steps", n, r, steps);
            cr_assert_eq(sends * 2, steps, "n=%d rank %d: sends half of the steps", n, r);
            int peers[16];
            int np = braid_recdbl_peers(n, r, peers, 16);
            cr_assert_eq(np, r >= P ? 1 : L + (r < n - P), "n=%d rank %d: %d peers", n, r, np);
        }
    }
}

Test(plan, reduce_scatter_gives_each_rank_its_block)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        elem_t *outs[MAXN];
        simulate(BRAID_COLL_REDUCE_SCATTER, n, -1, count, chunks[ki], nch, count * (size_t)n, count,
                 outs);
        for (int r = 0; r < n; r++) {
            for (size_t i = 0; i < count; i++) {
                cr_assert_eq(outs[r][i].contrib, all_ranks(n), "n=%d rank %d elem %zu", n, r, i);
                cr_assert_eq(outs[r][i].idxsum, (uint64_t)n * ((size_t)r * count + i));
            }
            free(outs[r]);
        }
    }
}

Test(plan, allgather_places_each_rank_block)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        elem_t *outs[MAXN];
        simulate(BRAID_COLL_ALLGATHER, n, -1, count, chunks[ki], nch, count, count * (size_t)n,
                 outs);
        for (int r = 0; r < n; r++) {
            for (int b = 0; b < n; b++)
                for (size_t i = 0; i < count; i++) {
                    elem_t *e = &outs[r][(size_t)b * count + i];
                    cr_assert_eq(e->contrib, 1ull << (8 * b), "n=%d rank %d block %d elem %zu", n,
                                 r, b, i);
                    cr_assert_eq(e->idxsum, i);
                }
            free(outs[r]);
        }
    }
}

Test(plan, broadcast_and_reduce_every_root)
{
    FOR_SHAPES
    {
        size_t count = counts[ci];
        for (int root = 0; root < n; root++) {
            elem_t *outs[MAXN];
            simulate(BRAID_COLL_BROADCAST, n, root, count, chunks[ki], nch, count, count, outs);
            for (int r = 0; r < n; r++) {
                for (size_t i = 0; i < count; i++) {
                    cr_assert_eq(outs[r][i].contrib, 1ull << (8 * root));
                    cr_assert_eq(outs[r][i].idxsum, i);
                }
                free(outs[r]);
            }
            simulate(BRAID_COLL_REDUCE, n, root, count, chunks[ki], nch, count, count, outs);
            for (size_t i = 0; i < count; i++) {
                cr_assert_eq(outs[root][i].contrib, all_ranks(n), "reduce n=%d root %d", n, root);
                cr_assert_eq(outs[root][i].idxsum, (uint64_t)n * i);
            }
            for (int r = 0; r < n; r++)
                free(outs[r]);
        }
    }
}

Test(plan, allreduce_step_count_is_2n_minus_1_per_loop)
{
    for (int n = 2; n <= MAXN; n++) {
        braid_plan_params_t p = {.coll = BRAID_COLL_ALLREDUCE,
                                 .nranks = n,
                                 .rank = 0,
                                 .count = (size_t)n * 10,
                                 .chunk = 10,
                                 .nchannels = 1};
        braid_plan_cursor_t c;
        braid_plan_begin(&c, &p, 0);
        braid_step_t s;
        int steps = 0, sends = 0, recvs = 0;
        while (braid_plan_next(&c, &s)) {
            steps++;
            sends += braid_prim_sends(s.prim);
            recvs += braid_prim_recvs(s.prim);
        }
        cr_assert_eq(steps, 2 * n - 1);
        cr_assert_eq(sends, 2 * (n - 1));
        cr_assert_eq(recvs, 2 * (n - 1));
    }
}

/* Topology-aware rings visit ranks in any order: every ring collective must still give each
 * rank its own result (reduce-scatter block, all-gather placement, chain roots). */
Test(plan, ring_collectives_under_shuffled_ring_orders)
{
    for (int n = 2; n <= MAXN; n++) {
        int orders[3][MAXN];
        for (int q = 0; q < n; q++) {
            orders[0][q] = n - 1 - q;                                           /* reversed */
            orders[1][q] = q < (n + 1) / 2 ? 2 * q : 2 * (q - (n + 1) / 2) + 1; /* evens, odds */
            orders[2][q] = (q * 3 + 1) % n; /* stride (when a bijection) */
        }
        for (int k = 0; k < 3; k++) {
            int seen[MAXN] = {0}, ok = 1;
            for (int q = 0; q < n; q++)
                ok &= !seen[orders[k][q]]++;
            if (!ok) continue;
            sim_order = orders[k];
            size_t counts2[] = {1, 13, 97};
            for (size_t ci = 0; ci < 3; ci++) {
                size_t count = counts2[ci];
                elem_t *outs[MAXN];
                simulate(BRAID_COLL_ALLREDUCE, n, -1, count, 5, 2, count, count, outs);
                for (int r = 0; r < n; r++) {
                    for (size_t i = 0; i < count; i++)
                        cr_assert_eq(outs[r][i].contrib, all_ranks(n), "order %d n=%d", k, n);
                    free(outs[r]);
                }
                simulate(BRAID_COLL_REDUCE_SCATTER, n, -1, count, 5, 2, count * (size_t)n, count,
                         outs);
                for (int r = 0; r < n; r++) {
                    for (size_t i = 0; i < count; i++) {
                        cr_assert_eq(outs[r][i].contrib, all_ranks(n));
                        cr_assert_eq(outs[r][i].idxsum, (uint64_t)n * ((size_t)r * count + i),
                                     "reduce_scatter order %d n=%d rank %d", k, n, r);
                    }
                    free(outs[r]);
                }
                simulate(BRAID_COLL_ALLGATHER, n, -1, count, 5, 2, count, count * (size_t)n, outs);
                for (int r = 0; r < n; r++) {
                    for (int b = 0; b < n; b++)
                        for (size_t i = 0; i < count; i++)
                            cr_assert_eq(outs[r][(size_t)b * count + i].contrib, 1ull << (8 * b),
                                         "allgather order %d n=%d rank %d block %d", k, n, r, b);
                    free(outs[r]);
                }
                for (int root = 0; root < n; root++) {
                    simulate(BRAID_COLL_BROADCAST, n, root, count, 5, 1, count, count, outs);
                    for (int r = 0; r < n; r++) {
                        for (size_t i = 0; i < count; i++)
                            cr_assert_eq(outs[r][i].contrib, 1ull << (8 * root));
                        free(outs[r]);
                    }
                    simulate(BRAID_COLL_REDUCE, n, root, count, 5, 1, count, count, outs);
                    for (size_t i = 0; i < count; i++)
                        cr_assert_eq(outs[root][i].contrib, all_ranks(n), "reduce root %d", root);
                    for (int r = 0; r < n; r++)
                        free(outs[r]);
                }
            }
        }
    }
    sim_order = NULL;
}

/* Binomial trees: every root, counts 0, 1, 13 under several chunkings. Broadcast gives every
 * rank the root's data; reduce gives the root every contribution once, avg divided once, and
 * the same reduction expression whatever the chunking (one fixed order). */
Test(plan, tree_broadcast_and_reduce_every_root)
{
    static const size_t tcounts[] = {0, 1, 13};
    static const size_t tchunks[] = {1, 4, 13, 1 << 20};
    for (int n = 1; n <= MAXN; n++)
        for (size_t ci = 0; ci < 3; ci++)
            for (int root = 0; root < n; root++) {
                size_t count = tcounts[ci];
                uint64_t expr0[16] = {0};
                for (size_t ki = 0; ki < 4; ki++) {
                    size_t chunk = tchunks[ki];
                    elem_t *outs[MAXN];
                    simulate_algo(BRAID_PLAN_TREE, BRAID_COLL_BROADCAST, n, root, count, chunk, 2,
                                  count, count, outs);
                    for (int r = 0; r < n; r++) {
                        for (size_t i = 0; i < count; i++) {
                            cr_assert_eq(outs[r][i].contrib, 1ull << (8 * root),
                                         "tree bcast n=%d root %d rank %d elem %zu", n, root, r, i);
                            cr_assert_eq(outs[r][i].idxsum, i);
                            cr_assert_eq(outs[r][i].finals, 0);
                        }
                        free(outs[r]);
                    }
                    simulate_algo(BRAID_PLAN_TREE, BRAID_COLL_REDUCE, n, root, count, chunk, 2,
                                  count, count, outs);
                    for (size_t i = 0; i < count; i++) {
                        const elem_t *e = &outs[root][i];
                        cr_assert_eq(e->contrib, all_ranks(n), "tree reduce n=%d root %d: %llx", n,
                                     root, (unsigned long long)e->contrib);
                        cr_assert_eq(e->idxsum, (uint64_t)n * i);
                        if (n > 1)
                            cr_assert_eq(e->finals, 1, "tree reduce n=%d root %d elem %zu", n, root,
                                         i);
                        if (ki == 0)
                            expr0[i] = e->expr;
                        else
                            cr_assert_eq(e->expr, expr0[i],
                                         "tree reduce n=%d root %d: order depends on chunking", n,
                                         root);
                    }
                    for (int r = 0; r < n; r++)
                        free(outs[r]);
                }
            }
}

Test(plan, tree_steps_and_peers)
{
    for (int n = 2; n <= MAXN; n++) {
        int depth = 0;
        while ((1 << depth) < n)
            depth++;
        for (int root = 0; root < n; root++) {
            int total_sends = 0, total_recvs = 0;
            for (int r = 0; r < n; r++) {
                braid_plan_params_t p = {.coll = BRAID_COLL_BROADCAST,
                                         .algo = BRAID_PLAN_TREE,
                                         .nranks = n,
                                         .rank = r,
                                         .root = root,
                                         .count = 5,
                                         .chunk = 5,
                                         .nchannels = 2};
                braid_plan_cursor_t c;
                braid_step_t s;
                braid_plan_begin(&c, &p, 1);
                cr_assert_not(braid_plan_next(&c, &s), "tree uses channel 0 only");
                braid_plan_begin(&c, &p, 0);
                int recvs = 0, steps = 0;
                while (braid_plan_next(&c, &s)) {
                    steps++;
                    recvs += braid_prim_recvs(s.prim);
                    total_sends += braid_prim_sends(s.prim);
                }
                cr_assert_eq(recvs, r == root ? 0 : 1, "n=%d root %d rank %d receives %d", n, root,
                             r, recvs);
                cr_assert_leq(steps, depth, "n=%d rank %d: %d steps > depth %d", n, r, steps,
                              depth);
                total_recvs += recvs;
            }
            cr_assert_eq(total_sends, n - 1, "n=%d root %d: %d sends", n, root, total_sends);
            cr_assert_eq(total_recvs, n - 1);
        }
    }
    /* Over BRAID_TREE_MAX_RANKS only the recursive doubling pairs are connected. */
    int peers[128];
    int n = BRAID_TREE_MAX_RANKS + 1;
    cr_assert_eq(braid_p2p_peers(n, 3, peers, 128), braid_recdbl_peers(n, 3, peers, 128));
    cr_assert_eq(braid_p2p_peers(64, 0, peers, 128), 11, "+-1..32 around 64 ranks");
}
