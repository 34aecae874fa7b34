/* Plans of the collectives on the send/recv connections (algos/p2p_plan.c), checked without
 * any transport for n = 1..9 and every root: for every pair (i, j), the sends of rank i to j
 * and the receives of rank j from i agree one for one, in order, on the count and on the
 * header identity (coll, seq, root); every output element is written by exactly one operation
 * (receive, local copy or the reducing receive) and, for alltoall/gather/scatter/allgatherv,
 * the element that lands there is the right one of the right sender (followed back through
 * the matching send to its input offset). */
#include "core/p2p.h"

#include <criterion/criterion.h>
#include <string.h>

#define MAXN 9

typedef struct {
    braid_p2p_batch_t b[MAXN];
} plans_t;

static void release(plans_t *p, int n)
{
    for (int r = 0; r < n; r++)
        braid_p2p_batch_free(&p->b[r]);
}

/* Fake buffers: element offsets are encoded as pointers from base 0x1000 (es = 1). */
#define SB ((const char *)0x100000)
#define RB ((char *)0x800000)

/* The k-th op of `kind` from r to peer (or -1). */
static const braid_p2p_op_t *nth(const braid_p2p_batch_t *b, int kind, int peer, int k)
{
    for (int i = 0; i < b->nops; i++)
        if (b->ops[i].kind == kind && b->ops[i].peer == peer && k-- == 0) return &b->ops[i];
    return NULL;
}

/* Checks pair matching and coverage; src_of[r][x] gets (sender, input offset) of output x. */
static void check(plans_t *p, const braid_pcoll_t *pc, int n, size_t out_len[MAXN],
                  long src_of[MAXN][512])
{
    for (int r = 0; r < n; r++)
        for (size_t x = 0; x < out_len[r]; x++)
            src_of[r][x] = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            for (int k = 0;; k++) {
                const braid_p2p_op_t *s = nth(&p->b[i], BRAID_P2P_SEND, j, k);
                const braid_p2p_op_t *rv = nth(&p->b[j], BRAID_P2P_RECV, i, k);
                if (!s && !rv) break;
                int reduce_recv = 0;
                for (int q = 0; !rv && q < p->b[j].nops; q++)
                    reduce_recv |= p->b[j].ops[q].kind == BRAID_P2P_RECV_REDUCE;
                if (reduce_recv && s && !rv) { /* reduce_scatterv: the fold receives */
                    cr_assert_eq(k, 0);
                    cr_assert_eq(s->count, pc->recvcounts[j], "rsv count %d->%d", i, j);
                    break;
                }
                cr_assert(s && rv, "%s n=%d: send %d->%d #%d without its receive (or back)",
                          braid_coll_name(pc->coll), n, i, j, k);
                cr_assert_eq(s->count, rv->count, "%s n=%d %d->%d count", braid_coll_name(pc->coll),
                             n, i, j);
                cr_assert(s->coll == rv->coll && s->seq == rv->seq && s->root == rv->root);
                size_t in = (size_t)((const char *)s->sbuf - SB);
                size_t out = (size_t)((char *)rv->rbuf - RB);
                for (size_t e = 0; e < rv->count; e++) {
                    cr_assert_lt(out + e, out_len[j]);
                    cr_assert_eq(src_of[j][out + e], -1, "output %zu of rank %d twice", out + e, j);
                    src_of[j][out + e] = (long)i * 100000 + (long)(in + e);
                }
            }
        }
    for (int r = 0; r < n; r++)
        for (int q = 0; q < p->b[r].nops; q++) {
            const braid_p2p_op_t *op = &p->b[r].ops[q];
            if (op->kind != BRAID_P2P_COPY && op->kind != BRAID_P2P_RECV_REDUCE) continue;
            size_t in = (size_t)((const char *)op->sbuf - SB);
            size_t out = (size_t)((char *)op->rbuf - RB);
            for (size_t e = 0; e < op->count; e++) {
                cr_assert_lt(out + e, out_len[r]);
                cr_assert_eq(src_of[r][out + e], -1, "output %zu of rank %d twice", out + e, r);
                src_of[r][out + e] = (long)r * 100000 + (long)(in + e);
            }
        }
}

static long src_of[MAXN][512];

Test(p2p_plan, alltoall_and_alltoallv_pair_up_and_cover)
{
    for (int n = 1; n <= MAXN; n++)
        for (int v = 0; v < 2; v++) {
            size_t sc[MAXN][MAXN], sd[MAXN][MAXN], rc[MAXN][MAXN], rd[MAXN][MAXN];
            size_t out_len[MAXN];
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    sc[i][j] = v ? (size_t)((i * 3 + j * 5) % 4) : 3; /* zeros too */
            for (int r = 0; r < n; r++) {
                size_t so = 0, ro = 0;
                for (int j = n - 1; j >= 0; j--) { /* reversed layout */
                    rc[r][j] = sc[j][r];
                    sd[r][j] = so;
                    so += sc[r][j];
                    rd[r][j] = ro;
                    ro += rc[r][j];
                }
                out_len[r] = v ? ro : 3 * (size_t)n;
            }
            plans_t p;
            for (int r = 0; r < n; r++) {
                braid_pcoll_t pc = {.coll = v ? BRAID_COLL_ALLTOALLV : BRAID_COLL_ALLTOALL,
                                    .sendbuf = SB,
                                    .recvbuf = RB,
                                    .count = 3,
                                    .dtype = BRAID_INT8,
                                    .root = -1,
                                    .sendcounts = sc[r],
                                    .sdispls = sd[r],
                                    .recvcounts = rc[r],
                                    .rdispls = rd[r]};
                memset(&p.b[r], 0, sizeof(p.b[r]));
                cr_assert_eq(braid_pcoll_plan(&pc, n, r, 5, &p.b[r]), BRAID_SUCCESS);
            }
            braid_pcoll_t pc0 = {.coll = v ? BRAID_COLL_ALLTOALLV : BRAID_COLL_ALLTOALL};
            check(&p, &pc0, n, out_len, src_of);
            for (int r = 0; r < n; r++)
                for (int s = 0; s < n; s++) {
                    size_t cnt = v ? rc[r][s] : 3, at = v ? rd[r][s] : (size_t)s * 3;
                    size_t from = v ? sd[s][r] : (size_t)r * 3;
                    for (size_t e = 0; e < cnt; e++)
                        cr_assert_eq(src_of[r][at + e], (long)s * 100000 + (long)(from + e),
                                     "n=%d v=%d: rank %d element %zu", n, v, r, at + e);
                }
            release(&p, n);
        }
}

Test(p2p_plan, gather_scatter_allgatherv_reduce_scatterv)
{
    for (int n = 1; n <= MAXN; n++)
        for (int root = 0; root < n; root++) {
            int colls[] = {BRAID_COLL_GATHER, BRAID_COLL_SCATTER, BRAID_COLL_ALLGATHERV,
                           BRAID_COLL_REDUCE_SCATTERV};
            for (int ci = 0; ci < 4; ci++) {
                int coll = colls[ci];
                if (root && coll >= BRAID_COLL_ALLGATHERV) continue;
                size_t rc[MAXN], dp[MAXN], tot = 0, out_len[MAXN];
                for (int i = 0; i < n; i++) {
                    rc[i] = (size_t)(i % 3);
                    dp[i] = tot;
                    tot += rc[i];
                }
                plans_t p;
                for (int r = 0; r < n; r++) {
                    braid_pcoll_t pc = {.coll = coll,
                                        .sendbuf = SB,
                                        .recvbuf = RB,
                                        .count = coll == BRAID_COLL_ALLGATHERV ? rc[r] : 4,
                                        .dtype = BRAID_INT8,
                                        .root = coll <= BRAID_COLL_SCATTER ? root : -1,
                                        .recvcounts = rc,
                                        .rdispls = dp};
                    memset(&p.b[r], 0, sizeof(p.b[r]));
                    cr_assert_eq(braid_pcoll_plan(&pc, n, r, 9, &p.b[r]), BRAID_SUCCESS);
                    out_len[r] = coll == BRAID_COLL_GATHER       ? (r == root ? 4 * (size_t)n : 0)
                                 : coll == BRAID_COLL_SCATTER    ? 4
                                 : coll == BRAID_COLL_ALLGATHERV ? tot
                                                                 : rc[r];
                }
                braid_pcoll_t pc0 = {.coll = coll, .recvcounts = rc};
                check(&p, &pc0, n, out_len, src_of);
                for (int r = 0; r < n; r++)
                    for (size_t x = 0; x < out_len[r]; x++) {
                        long want = -2;
                        if (coll == BRAID_COLL_GATHER)
                            want = (long)(x / 4) * 100000 + (long)(x % 4);
                        if (coll == BRAID_COLL_SCATTER)
                            want = (long)root * 100000 + (long)((size_t)r * 4 + x);
                        if (coll == BRAID_COLL_ALLGATHERV) {
                            int s = 0;
                            while (!(x >= dp[s] && x < dp[s] + rc[s]))
                                s++;
                            want = (long)s * 100000 + (long)(x - dp[s]);
                        }
                        if (coll == BRAID_COLL_REDUCE_SCATTERV) /* own block, folded */
                            want = (long)r * 100000 + (long)(dp[r] + x);
                        cr_assert_eq(src_of[r][x], want, "%s n=%d root=%d rank %d element %zu",
                                     braid_coll_name(coll), n, root, r, x);
                    }
                release(&p, n);
            }
        }
}

/* A batch that starts in the caller's array (BRAID_P2P_BATCH_ON) fills it, then moves to the
 * heap with every operation kept, and batch_free frees only what it allocated (ASan: a free of
 * the stack array, or a leak of the heap one, fails the test); a batch from {0} allocates at
 * once. The runner resets each added operation's progress fields. */
Test(p2p_plan, batch_on_the_stack_moves_to_the_heap_when_full)
{
    braid_p2p_op_t st[2];
    memset(st, 0, sizeof(st));
    braid_p2p_batch_t b = BRAID_P2P_BATCH_ON(st, 2);
    for (int i = 0; i < 7; i++) {
        braid_p2p_op_t op = {.kind = BRAID_P2P_SEND,
                             .peer = 10 + i,
                             .count = (size_t)i,
                             .done = 1,
                             .nmsgs = 3,
                             .off = 99};
        cr_assert_eq(braid_p2p_batch_add(&b, &op), BRAID_SUCCESS);
        cr_assert_eq(b.ops == st, i < 2, "op %d: %s", i, b.ops == st ? "stack" : "heap");
        cr_assert_eq(b.heap, i >= 2);
    }
    cr_assert_eq(b.nops, 7);
    cr_assert_geq(b.cap, 7);
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(b.ops[i].peer, 10 + i);
        cr_assert_eq(b.ops[i].count, (size_t)i);
        cr_assert_eq(b.ops[i].done, 0);
        cr_assert_eq(b.ops[i].nmsgs, 0);
        cr_assert_eq(b.ops[i].off, 0);
        cr_assert_eq(b.ops[i].next, -1);
    }
    braid_p2p_batch_free(&b);
    cr_assert_null(b.ops);
    cr_assert_eq(b.nops + b.cap + b.heap, 0);

    braid_p2p_batch_t h = {0};
    braid_p2p_op_t op = {.kind = BRAID_P2P_RECV, .peer = 1};
    cr_assert_eq(braid_p2p_batch_add(&h, &op), BRAID_SUCCESS);
    cr_assert(h.heap && h.ops && h.nops == 1);
    braid_p2p_batch_free(&h);

    braid_p2p_batch_t s1 = BRAID_P2P_BATCH_ON(st, 2); /* never outgrown: nothing to free */
    cr_assert_eq(braid_p2p_batch_add(&s1, &op), BRAID_SUCCESS);
    cr_assert(!s1.heap && s1.ops == st);
    braid_p2p_batch_free(&s1);
}
