/* Algorithm selection: BRAID_ALGO, or an alpha-beta cost model that estimates every applicable
 * algorithm for (collective, size, topology) and takes the cheapest.
 *
 * Model (times in microseconds; S = bytes per rank, n ranks on H hosts of L ranks each; a
 * link is alpha + bytes/bandwidth; intra = shm, inter = the network):
 *   ring     the block that travels furthest crosses 2(n-1) consecutive ring edges, about
 *            2(n-1)/n laps: latency 2(n-1)/n * sum of the ring's edge alphas. Every edge
 *            carries 2(n-1)/n * S bytes; the ring edges that leave one host share its NIC, so
 *            the bottleneck is max(intra edge, inter edges per host x inter edge).
 *   hier     reduce-scatter and all-gather within hosts ((L-1) intra steps of S/L each), and
 *            L concurrent inter-host all-reduces of S/L bytes sharing each host's NIC, each
 *            stage costed as its sub-communicator runs it (its own model's choice); a ring on
 *            the remainder when the count does not divide by L.
 *            Broadcast, reduce and reduce-scatter (hier.c): the sum of their stages, each
 *            costed on a sub-model (H ranks on H hosts, L ranks on one host) with the
 *            algorithm that sub-communicator's own model picks. Reduce is the broadcast
 *            mirrored and costs the same: one intra-host and one inter-host stage, plus an
 *            intra-host stage of max_local ranks on uneven hosts (the root's host reduces to
 *            the root after the inter-host stage; the root's op=avg division is not costed).
 *            Reduce-scatter adds a local pack of n x S bytes and its inter-host stage runs L
 *            rings that share each host's NIC (the network carries (n-L) S per host instead
 *            of the ring's (n-1) S). The stages run one after the other, so the chain
 *            broadcast / reduce (pipelined) keeps large messages.
 *   recdbl   (all-reduce) R = log2(P) rounds, plus 2 for the fix-up when n is not a power
 *            of two P; each round one message of S bytes per rank, in chunks of at most
 *            p2p_chunk bytes that do not overlap. The rounds whose partners all share a host
 *            (recdbl_intra_rounds, from the host map) cost the shm link; in the others every
 *            rank of a host sends through its NIC at once (nic_share x S over the network).
 *   chain    (ring broadcast / reduce) costed per call of a stream of calls: consecutive
 *            calls overlap up to W = min(slots, n-1) deep, so the path's (n-1) alphas count
 *            1/W, but its busiest rank still handles 2 messages per call (receive, forward):
 *            max(path / W, 2 hop alphas) + S over the bottleneck link (pipelined).
 *   tree     (broadcast, reduce; 2..BRAID_TREE_MAX_RANKS ranks) a binomial tree of depth
 *            D = ceil(log2 n); its root sends D messages per call one after the other (root
 *            serialization, which no overlap of calls hides), each of S bytes in chunks of at
 *            most p2p_chunk: D x (chunks x alpha + S/bandwidth) over the slowest link. It wins
 *            small messages once the chain's overlapped path, (n-1)/W hops, exceeds D (from
 *            about 40 ranks with 8 slots; up to 8 ranks, all this machine can run, the chain
 *            measured ahead or tied) and loses large ones (every level moves the message).
 * Oversubscription: with more ranks on a machine than cores, every step (ring edge, recdbl
 * round, tree level, chain hop) waits for its receiver to be scheduled: + oversub_us x (ranks
 * on the busiest machine - cores) / cores per step. Hosts that are network namespaces or
 * containers of one machine (same kernel boot id) share its cores. It favours the algorithms
 * with fewer steps (measured on 2 cores: recursive doubling ahead of the ring up to 32 KiB for
 * n = 4 and 8).
 * Composition: each estimate is a latency part (launches, step latencies, bytes within a
 * host) and the busiest NIC's byte time. A physical link serializes a message's bytes after
 * its latency: the parts add. A link whose queue absorbs a call's bytes (a token-bucket
 * shaper such as tc tbf, a cloud NIC's burst allowance; net_overlap, measured at init or
 * from the tuning file) only bounds a stream of calls by its rate: the larger part counts.
 * Constants: built in (algo.h) or from BRAID_TUNING_FILE (tune.c), the same on every rank.
 * BRAID_ALGO=tree forces the tree for broadcast and reduce only; every other collective (and
 * communicators over BRAID_TREE_MAX_RANKS ranks) keeps to the ring. */
#include "algos/algo.h"
#include "algos/direct.h"
#include "algos/plan.h"
#include "core/config.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/split.h"
#include "transport/shm_direct.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Static_assert(BRAID_PLAN_RING == BRAID_ALGO_RING && BRAID_PLAN_RECDBL == BRAID_ALGO_RECDBL &&
                   BRAID_PLAN_TREE == BRAID_ALGO_TREE,
               "plan families are algorithm ids");

static const char *algo_names[BRAID_ALGO_COUNT] = {"ring", "hier", "recdbl", "tree", "direct"};

const char *braid_algo_name(int algo)
{
    if (algo == BRAID_ALGO_AUTO) return "auto";
    return algo >= 0 && algo < BRAID_ALGO_COUNT ? algo_names[algo] : "invalid";
}

braid_result_t braid_algo_parse(const char *name, int *algo_p)
{
    if (!name || !*name || !strcasecmp(name, "auto")) {
        *algo_p = BRAID_ALGO_AUTO;
        return BRAID_SUCCESS;
    }
    for (int i = 0; i < BRAID_ALGO_COUNT; i++)
        if (!strcasecmp(name, algo_names[i])) {
            *algo_p = i;
            return BRAID_SUCCESS;
        }
    return braid_set_error(
        BRAID_ERR_INVALID_ARG,
        "BRAID_ALGO='%s' is not one of the algorithms: ring, hier, recdbl, tree, direct "
        "(or empty for automatic)",
        name);
}

/* ---- the model ------------------------------------------------------------------------------ */
/* Ring edges that leave a host, in total and from the busiest host; order NULL = rank order. */
void braid_model_set_ring(braid_model_t *m, const braid_topo_t *t, const int *order)
{
    m->ring_crossings = m->ring_host_out = 0;
    int *out = calloc((size_t)t->nhosts, sizeof(int));
    for (int q = 0; t->nranks > 1 && q < t->nranks; q++) {
        int r0 = order ? order[q] : q,
            r1 = order ? order[(q + 1) % t->nranks] : (q + 1) % t->nranks;
        int a = t->host[r0], b = t->host[r1];
        if (a == b) continue;
        m->ring_crossings++;
        if (out) out[a]++;
    }
    for (int h = 0; out && h < t->nhosts; h++)
        if (out[h] > m->ring_host_out) m->ring_host_out = out[h];
    if (!out && m->ring_crossings) m->ring_host_out = m->ring_crossings; /* pessimistic */
    free(out);
}

/* Rounds of recursive doubling (recdbl.c: partner q xor 2^i, the fix-up pairs e - P and e)
 * in which every pair of partners is on one host. */
static int recdbl_intra_rounds(const braid_topo_t *t)
{
    int n = t->nranks, P = 1, k = 0;
    while (P * 2 <= n)
        P *= 2;
    for (int bit = 1; bit < P; bit *= 2) {
        int same = 1;
        for (int q = 0; q < P && same; q++)
            same = t->host[q] == t->host[q ^ bit];
        k += same;
    }
    int same = 1;
    for (int e = P; e < n && same; e++)
        same = t->host[e] == t->host[e - P];
    return k + (P < n && same ? 2 : 0);
}

void braid_model_init(braid_model_t *m, const braid_topo_t *t)
{
    memset(m, 0, sizeof(*m));
    m->nranks = t->nranks;
    m->nhosts = t->nhosts;
    m->min_local = t->min_local;
    m->max_local = t->max_local;
    braid_model_set_ring(m, t, NULL);
    m->intra = (braid_link_model_t){BRAID_MODEL_SHM_ALPHA_US, BRAID_MODEL_SHM_GBPS};
    m->inter = (braid_link_model_t){BRAID_MODEL_NET_ALPHA_US, BRAID_MODEL_NET_GBPS};
    m->copy = (braid_link_model_t){0.0, BRAID_MODEL_COPY_GBPS};
    m->launch_us = BRAID_MODEL_LAUNCH_US;
    m->oversub_us = BRAID_MODEL_OVERSUB_US;
    m->host_ranks = t->max_local;
    m->nslots = BRAID_MODEL_NSLOTS;
    m->p2p_chunk = BRAID_P2P_MAX_CHUNK;
    m->nic_share = t->max_local;
    m->recdbl_intra_rounds = recdbl_intra_rounds(t);
    m->direct_link = (braid_link_model_t){BRAID_MODEL_DIRECT_ALPHA_US, BRAID_MODEL_DIRECT_GBPS};
}

int braid_model_force_transport(braid_model_t *m, const char *name)
{
    if (!name || (strcmp(name, "tcp") && strcmp(name, "rdma"))) return 0;
    m->intra = m->inter;
    m->net_only = 1;
    return 1;
}

int braid_algo_applies(int algo, int coll, size_t count, const braid_model_t *m)
{
    switch (algo) {
    case BRAID_ALGO_RING:
        return 1;
    case BRAID_ALGO_HIER:
        if (m->nhosts < 2 || m->max_local < 2 || count == 0) return 0;
        if (coll == BRAID_COLL_BROADCAST || coll == BRAID_COLL_REDUCE) return 1;
        if (m->min_local != m->max_local) return 0;
        if (coll == BRAID_COLL_REDUCE_SCATTER) return 1;
        return coll == BRAID_COLL_ALLREDUCE && count >= (size_t)m->min_local;
    case BRAID_ALGO_RECDBL:
        return coll == BRAID_COLL_ALLREDUCE && m->nranks >= 2;
    case BRAID_ALGO_TREE:
        return (coll == BRAID_COLL_BROADCAST || coll == BRAID_COLL_REDUCE) && m->nranks >= 2 &&
               m->nranks <= BRAID_TREE_MAX_RANKS;
    case BRAID_ALGO_DIRECT:
        if (!m->direct || m->nhosts != 1 || m->nranks < 2) return 0;
        if (coll == BRAID_COLL_REDUCE_SCATTER) /* a block holds n parts of an element at least */
            return (size_t)m->nranks * 8 <=
                   (m->direct_block ? m->direct_block : BRAID_DIRECT_BLOCK_DEFAULT);
        return coll == BRAID_COLL_ALLREDUCE || coll == BRAID_COLL_ALLGATHER ||
               coll == BRAID_COLL_BROADCAST || coll == BRAID_COLL_REDUCE;
    default:
        return 0;
    }
}

static double us_for(double bytes, const braid_link_model_t *l)
{
    return bytes / (l->gbps * 1e3);
}

/* An estimate in two parts: `net` is the time the busiest host's network link spends on the
 * call's bytes, `lat` everything else on the critical path (launches, latencies, bytes within a
 * host). A physical link serializes each message, so the two add; a link whose queue absorbs
 * a call's bytes (net_overlap: a token-bucket shaper, a cloud NIC's burst allowance) only
 * bounds a stream of calls by its rate, so the larger of the two counts. */
typedef struct {
    double lat, net;
} cost_t;

static double total(cost_t c, const braid_model_t *m)
{
    if (m->net_overlap > 0) return c.lat > c.net ? c.lat : c.net;
    return c.lat + c.net;
}

static cost_t add(cost_t a, cost_t b)
{
    return (cost_t){a.lat + b.lat, a.net + b.net};
}

static int oversubscribed(const braid_model_t *m)
{
    return m->cores > 0 && m->host_ranks > m->cores;
}

/* Oversubscription: with more ranks on a machine than cores, a message waits for its receiver
 * to be scheduled; each step pays oversub_us per extra rank per core. */
double braid_model_step_penalty_us(const braid_model_t *m)
{
    if (!oversubscribed(m)) return 0.0;
    return m->oversub_us * (double)(m->host_ranks - m->cores) / m->cores;
}

/* Bytes within a host and over the network move in the same pipeline: the slower counts. */
static cost_t piped(double lat, double t_intra, double t_inter)
{
    if (t_intra >= t_inter) return (cost_t){lat + t_intra, 0.0};
    return (cost_t){lat, t_inter};
}

/* Ring all-reduce-like pattern: `laps` laps of latency, `per_edge` bytes on every edge. */
static cost_t ring_cost(double laps, double per_edge, const braid_model_t *m)
{
    int n = m->nranks, x = m->ring_crossings;
    double lap =
        x * m->inter.alpha_us + (n - x) * m->intra.alpha_us + n * braid_model_step_penalty_us(m);
    double t_intra = us_for(per_edge, &m->intra);
    double t_inter = x ? us_for(per_edge * m->ring_host_out, &m->inter) : 0.0;
    return piped(m->launch_us + laps * lap, t_intra, t_inter);
}

/* The model of a sub-communicator of k ranks on hh hosts (one block per host) whose
 * inter-host rings share each host's NIC with `share` - 1 others. */
static braid_model_t sub_model(const braid_model_t *m, int k, int hh, int share)
{
    braid_model_t s = *m;
    s.nranks = k;
    s.nhosts = hh;
    s.min_local = s.max_local = k / hh;
    s.ring_crossings = hh > 1 ? hh : 0;
    s.ring_host_out = hh > 1 ? share : 0;
    s.recdbl_intra_rounds = 0;
    s.nic_share = hh > 1 ? share : 1;
    /* its sub-communicator maps them, but over a forced network transport (shm_direct.c) */
    s.direct = hh == 1 && k > 1 && s.direct_block > 0 && !s.net_only;
    return s;
}

static int model_cost(int algo, int coll, size_t bytes, size_t count, const braid_model_t *m,
                      cost_t *c);

/* The cost of coll on a sub-model with the algorithm that sub-communicator's model picks. */
static cost_t best_cost(int coll, size_t bytes, size_t count, const braid_model_t *s)
{
    cost_t c = {0, 0};
    model_cost(braid_model_choose(coll, bytes, count, s), coll, bytes, count, s, &c);
    return c;
}

/* hier broadcast, reduce and reduce-scatter: the sum of their stages, each as the stage's
 * sub-communicator would run it (see hier.c). */
static cost_t hier_cost(int coll, size_t bytes, size_t count, const braid_model_t *m)
{
    int L = m->min_local, H = m->nhosts;
    braid_model_t intra = sub_model(m, L, 1, 1), inter = sub_model(m, H, H, 1);
    if (coll == BRAID_COLL_BROADCAST || coll == BRAID_COLL_REDUCE) {
        /* a host without the root's local index: one more stage on the root's host (for
         * reduce the other hosts' intra-host stage, then the root's host's after the
         * inter-host one) */
        cost_t t =
            add(best_cost(coll, bytes, count, &inter), best_cost(coll, bytes, count, &intra));
        if (m->min_local != m->max_local) {
            braid_model_t big = sub_model(m, m->max_local, 1, 1);
            t = add(t, best_cost(coll, bytes, count, &big));
        }
        return t;
    }
    inter = sub_model(m, H, H, L);
    if (coll == BRAID_COLL_ALLREDUCE) {
        /* reduce-scatter within hosts, all-reduce of a 1/L block among equal local indices
         * (L of them share each NIC), all-gather within hosts; the tail over the flat ring */
        size_t blk = count / (size_t)L, bb = count ? bytes / count * blk : 0;
        cost_t t = add(best_cost(BRAID_COLL_REDUCE_SCATTER, bb, blk, &intra),
                       best_cost(BRAID_COLL_ALLREDUCE, bb, blk, &inter));
        t = add(t, best_cost(BRAID_COLL_ALLGATHER, bb, blk, &intra));
        if (count % (size_t)L) t = add(t, ring_cost(2.0 * (m->nranks - 1) / m->nranks, 0.0, m));
        return t;
    }
    /* reduce-scatter: pack n blocks, intra-host H blocks per rank, inter-host (L rings share
     * each NIC) one block per rank */
    cost_t t = {us_for((double)bytes * m->nranks, &m->copy), 0.0};
    t = add(t, best_cost(coll, bytes * (size_t)H, count * (size_t)H, &intra));
    return add(t, best_cost(coll, bytes, count, &inter));
}

/* Broadcast / reduce on the chain, per call of a stream of calls: consecutive calls overlap
 * up to W = min(slots, n-1) deep (the root starts the next call once its send is posted), so
 * the path's latency counts 1/W; but the busiest rank still handles two messages per call
 * (receive, then forward; one for n = 2). The data is pipelined: S over the bottleneck. */
static cost_t chain_cost(double S, const braid_model_t *m)
{
    int n = m->nranks, x = m->ring_crossings, W = m->nslots < n - 1 ? m->nslots : n - 1;
    double p = braid_model_step_penalty_us(m), f = (double)(n - 1) / n;
    double lap = x * m->inter.alpha_us + (n - x) * m->intra.alpha_us + n * p;
    double hop = (x ? m->inter.alpha_us : m->intra.alpha_us) + p;
    double path = f * lap / (W > 0 ? W : 1), busy = (n > 2 ? 2 : 1) * hop;
    double t_intra = us_for(S, &m->intra);
    double t_inter = x ? us_for(S * m->ring_host_out, &m->inter) : 0.0;
    return piped(m->launch_us + (path > busy ? path : busy), t_intra, t_inter);
}

/* Recursive doubling / binomial tree: R rounds (recdbl_intra_rounds of them between ranks of
 * one host), each one message of S bytes per rank in chunks of at most p2p_chunk; in a round
 * over the network the ranks of a host (nic_share) send through its NIC at once. The tree's
 * levels all count as network rounds when there are several hosts. */
int braid_model_rounds(int algo, int n)
{
    int P = 1, rounds = 0;
    while (P * 2 <= n) {
        P *= 2;
        rounds++;
    }
    return rounds + (P < n ? (algo == BRAID_ALGO_TREE ? 1 : 2) : 0);
}

static cost_t rounds_cost(int algo, double S, size_t bytes, const braid_model_t *m)
{
    int rounds = braid_model_rounds(algo, m->nranks);
    int ri = m->nhosts < 2 ? rounds : algo == BRAID_ALGO_RECDBL ? m->recdbl_intra_rounds : 0;
    int rn = rounds - ri, share = algo == BRAID_ALGO_RECDBL && m->nic_share > 1 ? m->nic_share : 1;
    double chunks = S > 0 ? (double)((bytes + m->p2p_chunk - 1) / m->p2p_chunk) : 1.0;
    double p = braid_model_step_penalty_us(m);
    double lat = m->launch_us + ri * (chunks * (m->intra.alpha_us + p) + us_for(S, &m->intra)) +
                 rn * chunks * (m->inter.alpha_us + p);
    return (cost_t){lat, rn * us_for(S * share, &m->inter)};
}

/* Direct shared memory (direct.c), in blocks of the slot size: all-reduce up to the small
 * limit one synchronisation and every rank reads all n inputs, above it (and reduce) two
 * synchronisations per block; reduce-scatter and all-gather one per block (the block holds n
 * parts of reduce-scatter's), broadcast two (the root waits for the others' previous block).
 * Bytes at the path's bus bandwidth, as the ring's per-edge bytes. A synchronisation reads one
 * line per peer; with more ranks than cores it waits for every rank to be scheduled (n step
 * penalties). */
static cost_t direct_cost(int coll, double S, const braid_model_t *m)
{
    int n = m->nranks;
    double sync = m->direct_link.alpha_us * (n - 1) + n * braid_model_step_penalty_us(m);
    size_t block = m->direct_block ? m->direct_block : BRAID_DIRECT_BLOCK_DEFAULT;
    double f = (double)(n - 1) / n, per = (double)block, syncs = 2, moved = 2 * f * S;
    if (coll == BRAID_COLL_ALLREDUCE && S <= (double)braid_direct_small_max(block, n))
        return (cost_t){m->launch_us + sync + us_for(S * n, &m->copy), 0.0};
    if (coll == BRAID_COLL_REDUCE_SCATTER || coll == BRAID_COLL_ALLGATHER) {
        syncs = 1;
        moved = S * (n - 1); /* S is per rank */
        if (coll == BRAID_COLL_REDUCE_SCATTER) per = (double)(block / ((size_t)n * 8) * 8);
    } else if (coll == BRAID_COLL_BROADCAST) {
        moved = S;
    }
    if (coll == BRAID_COLL_ALLGATHER || coll == BRAID_COLL_BROADCAST)
        per = (double)braid_direct_copy_block(block, n);
    double nb = S > 0 ? (double)(size_t)((S + per - 1) / per) : 1.0;
    return (cost_t){m->launch_us + syncs * nb * sync + us_for(moved, &m->direct_link), 0.0};
}

static int model_cost(int algo, int coll, size_t bytes, size_t count, const braid_model_t *m,
                      cost_t *c)
{
    if (!braid_algo_applies(algo, coll, count, m)) return 0;
    int n = m->nranks;
    double S = (double)bytes, f = n > 1 ? (double)(n - 1) / n : 0.0;
    if (n == 1)
        *c = (cost_t){m->launch_us + us_for(S, &m->intra), 0.0};
    else if (algo == BRAID_ALGO_RING &&
             (coll == BRAID_COLL_ALLREDUCE || coll == BRAID_COLL_BARRIER))
        *c = ring_cost(2 * f, 2 * f * S, m);
    else if (algo == BRAID_ALGO_RING &&
             (coll == BRAID_COLL_REDUCE_SCATTER || coll == BRAID_COLL_ALLGATHER))
        *c = ring_cost(f, S * (n - 1), m); /* S is per rank */
    else if (algo == BRAID_ALGO_RING)
        *c = chain_cost(S, m); /* broadcast / reduce: a pipelined chain */
    else if (algo == BRAID_ALGO_RECDBL || algo == BRAID_ALGO_TREE)
        *c = rounds_cost(algo, S, bytes, m);
    else if (algo == BRAID_ALGO_DIRECT)
        *c = direct_cost(coll, S, m);
    else
        *c = hier_cost(coll, bytes, count, m);
    return 1;
}

double braid_model_time(int algo, int coll, size_t bytes, size_t count, const braid_model_t *m)
{
    cost_t c;
    if (!model_cost(algo, coll, bytes, count, m, &c)) return -1.0;
    return total(c, m);
}

/* The cheapest by total; between equal totals (a link-bound tie when the network absorbs
 * bytes), the one with less latency and bytes together, which finishes first whenever the
 * link is not the bound; then the lower id. */
int braid_model_choose(int coll, size_t bytes, size_t count, const braid_model_t *m)
{
    int best = -1;
    double best_t = 0, best_sum = 0;
    for (int a = 0; a < BRAID_ALGO_COUNT; a++) {
        cost_t c;
        if (!model_cost(a, coll, bytes, count, m, &c)) continue;
        double t = total(c, m), sum = c.lat + c.net;
        int tie = best >= 0 && t <= best_t * (1 + 1e-9) && t >= best_t * (1 - 1e-9);
        if (best < 0 || (!tie && t < best_t) || (tie && sum < best_sum)) {
            best = a;
            best_t = t;
            best_sum = sum;
        }
    }
    return best < 0 ? BRAID_ALGO_RING : best;
}

static void print_coll(const braid_model_t *m, FILE *f, int coll, const char *what)
{
    fprintf(f, "%s (float32) estimated us:\n%12s", what, "bytes");
    for (int a = 0; a < BRAID_ALGO_COUNT; a++)
        fprintf(f, " %10s", algo_names[a]);
    fprintf(f, "  choice\n");
    for (size_t b = 8; b <= ((size_t)256 << 20); b *= 2) {
        fprintf(f, "%12zu", b);
        for (int a = 0; a < BRAID_ALGO_COUNT; a++) {
            double t = braid_model_time(a, coll, b, b / 4, m);
            if (t < 0)
                fprintf(f, " %10s", "-");
            else
                fprintf(f, " %10.1f", t);
        }
        fprintf(f, "  %s\n", algo_names[braid_model_choose(coll, b, b / 4, m)]);
    }
}

void braid_model_print(const braid_model_t *m, FILE *f)
{
    fprintf(f,
            "cost model: %d ranks on %d host(s), %d..%d per host, rank-order ring crosses hosts "
            "%d times (%d per host); shm %.2f us + %.2f GB/s, net %.2f us + %.2f GB/s (%s); "
            "%d ranks on the busiest machine of %d cores (%.2f us per step per extra rank per "
            "core)\n",
            m->nranks, m->nhosts, m->min_local, m->max_local, m->ring_crossings, m->ring_host_out,
            m->intra.alpha_us, m->intra.gbps, m->inter.alpha_us, m->inter.gbps,
            m->net_overlap > 0 ? "its queue absorbs a call's bytes" : "serializes bytes",
            m->host_ranks, m->cores, m->oversub_us);
    print_coll(m, f, BRAID_COLL_ALLREDUCE, "allreduce");
    print_coll(m, f, BRAID_COLL_BROADCAST, "broadcast");
    print_coll(m, f, BRAID_COLL_REDUCE, "reduce");
    print_coll(m, f, BRAID_COLL_REDUCE_SCATTER, "reduce_scatter (bytes per rank)");
}

/* ---- per communicator ------------------------------------------------------------------------ */
/* The algorithm that runs (coll, count): forced if it applies, else the model's choice. */
static int pick_uncached(const braid_algo_state_t *st, int coll, size_t count, size_t es)
{
    if (st->forced != BRAID_ALGO_AUTO)
        return braid_algo_applies(st->forced, coll, count, &st->model) ? st->forced
                                                                       : BRAID_ALGO_RING;
    return braid_model_choose(coll, count * es, count, &st->model);
}

/* A cache entry: count << 16 | element size << 8 | coll << 4 | (algo + 1); 0 = empty. Counts
 * of 2^48 elements or more, element sizes or collectives that do not fit, are not cached. */
static int pick(braid_algo_state_t *st, int coll, size_t count, size_t es)
{
    _Static_assert(BRAID_ALGO_COUNT < 15, "algo + 1 must fit 4 bits");
    if (count >> 48 || es > 255 || coll < 0 || coll > 15) return pick_uncached(st, coll, count, es);
    uint64_t key = (uint64_t)count << 16 | (uint64_t)es << 8 | (uint64_t)coll << 4;
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 58) % BRAID_PICK_CACHE;
    uint64_t e = atomic_load_explicit(&st->pick_cache[h], memory_order_relaxed);
    if (e && (e & ~(uint64_t)15) == key) return (int)(e & 15) - 1;
    int algo = pick_uncached(st, coll, count, es);
    atomic_store_explicit(&st->pick_cache[h], key | (uint64_t)(algo + 1), memory_order_relaxed);
    return algo;
}

void braid_algo_pick_forget(braid_algo_state_t *st)
{
    for (int i = 0; i < BRAID_PICK_CACHE; i++)
        atomic_store_explicit(&st->pick_cache[i], 0, memory_order_relaxed);
}

#define DIGEST_SIZES 34 /* 2^k float32 elements, k = 0..33, of every collective but barrier */
#define DIGEST_COLLS 5
#define DIGEST_BYTES (DIGEST_COLLS * DIGEST_SIZES + 1)

static void digest(braid_algo_state_t *st, uint8_t out[DIGEST_BYTES])
{
    out[0] = (uint8_t)(st->forced + 1);
    for (int c = 0; c < DIGEST_COLLS; c++)
        for (int k = 0; k < DIGEST_SIZES; k++)
            out[1 + c * DIGEST_SIZES + k] =
                (uint8_t)pick(st, BRAID_COLL_ALLREDUCE + c, (size_t)1 << k, 4);
}

static void log_table(const braid_algo_state_t *st)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return;
    braid_model_print(&st->model, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        braid_info(TUNING, "%s", line);
    free(text);
}

/* BRAID_TUNING_FILE as rank 0 reads it, and BRAID_TUNE_MEASURE as rank 0 sets it, the same on
 * every rank (bootstrap allgathers): a rank that read another file, or none, would choose
 * differently, and one that skipped a measurement the others run would leave them waiting. */
typedef struct {
    int32_t status, measure;
    char msg[232];
    braid_model_t m;
} tuning_blob_t;

static void take_constants(braid_model_t *m, const braid_model_t *from)
{
    m->intra = from->intra;
    m->inter = from->inter;
    m->copy = from->copy;
    m->launch_us = from->launch_us;
    m->oversub_us = from->oversub_us;
    m->net_overlap = from->net_overlap;
}

static braid_result_t load_tuning(struct braid_comm *c, braid_algo_state_t *st)
{
    braid_model_t *m = &st->model;
    tuning_blob_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.m = *m;
    mine.m.cores = c->machine_ncpus; /* cpus the ranks of this machine may use */
    int64_t measure = 0;             /* hier's sub-communicators measure nothing: not even read */
    if (!braid_split_is_internal()) BRAID_CHECK(braid_param_int("TUNE_MEASURE", &measure));
    if (measure < 0 || measure > 20)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "BRAID_TUNE_MEASURE=%lld: want 0 (off) or 1..20 (repetitions)",
                               (long long)measure);
    mine.measure = (int32_t)measure;
    const char *path = braid_split_is_internal() ? "" : braid_param_str("TUNING_FILE");
    if (c->rank == 0 && path && *path) {
        mine.status = braid_tuning_read(path, &mine.m);
        if (mine.status)
            snprintf(mine.msg, sizeof(mine.msg), "%s", braid_last_error());
        else
            braid_info(TUNING, "cost model constants from %s", path);
    }
    if (c->nranks == 1) {
        if (mine.status) return braid_set_error(mine.status, "%s", mine.msg);
        take_constants(m, &mine.m);
        m->cores = mine.m.cores;
        return BRAID_SUCCESS;
    }
    tuning_blob_t *all = malloc((size_t)c->nranks * sizeof(tuning_blob_t));
    if (!all) return braid_set_error(BRAID_ERR_NOMEM, "out of memory sharing the tuning file");
    braid_result_t res = braid_boot_allgather(c->boot, &mine, all, sizeof(tuning_blob_t));
    if (res == BRAID_SUCCESS && all[0].status)
        res = braid_set_error(all[0].status, "rank 0: %s", all[0].msg);
    if (res == BRAID_SUCCESS) {
        take_constants(m, &all[0].m);
        /* the fewest cores any rank may run on (every rank computes the same) */
        m->cores = all[0].m.cores;
        for (int r = 1; r < c->nranks; r++)
            if (all[r].m.cores < m->cores) m->cores = all[r].m.cores;
    }
    if (res == BRAID_SUCCESS && all[0].measure) {
        /* every rank takes part; rank 0's numbers are the ones every rank keeps */
        res = braid_tuning_measure(c, st, all[0].measure);
        if (res == BRAID_SUCCESS) {
            mine.m = *m;
            res = braid_boot_allgather(c->boot, &mine, all, sizeof(tuning_blob_t));
        }
        if (res == BRAID_SUCCESS) take_constants(m, &all[0].m);
        if (res == BRAID_SUCCESS && st->hier_ready) braid_hier_share_model(st);
    }
    braid_algo_pick_forget(st);
    free(all);
    return res;
}

/* Ranks on the busiest machine: hosts that are namespaces or containers of one machine share
 * its cpus, so oversubscription counts ranks per machine (at least the busiest host's). */
static int busiest_machine(const struct braid_comm *c)
{
    int most = 0;
    for (int i = 0; i < c->nranks; i++) {
        int k = 0;
        for (int j = 0; j < c->nranks; j++)
            k += !strcmp(c->peers[i].machine, c->peers[j].machine);
        if (k > most) most = k;
    }
    return most;
}

static void state_free(braid_algo_state_t *st)
{
    if (st->intra) braid_comm_destroy(st->intra); /* made by the measurement at init, or hier */
    if (st->inter) braid_comm_destroy(st->inter);
    braid_topo_free(&st->topo);
    free(st->scratch);
    pthread_mutex_destroy(&st->sub_lock);
    free(st);
}

braid_result_t braid_algo_comm_init(struct braid_comm *c)
{
    braid_result_t res = BRAID_SUCCESS;
    uint8_t *all = NULL;
    braid_algo_state_t *st = calloc(1, sizeof(*st));
    if (!st) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for the algorithm state");
    pthread_mutex_init(&st->sub_lock, NULL);
    st->forced = c->algo;
    BRAID_CHECK_GOTO(
        braid_topo_group(c->nranks, c->peers[0].host, sizeof(braid_peer_info_t), &st->topo), res,
        fail);
    braid_model_init(&st->model, &st->topo);
    braid_model_set_ring(&st->model, &st->topo, c->ring_order);
    st->model.host_ranks = busiest_machine(c);
    if (c->p2p_chunk_bytes) st->model.p2p_chunk = c->p2p_chunk_bytes;
    st->model.direct = c->direct != NULL;
    st->model.direct_block = c->direct_block;
    st->model.direct_block_auto = c->direct_block_auto;
    if (c->nslots > 0) st->model.nslots = c->nslots;
    if (c->transport && braid_model_force_transport(&st->model, c->transport->name))
        braid_info(TUNING, "BRAID_TRANSPORT=%s: links within a host cost as network links",
                   c->transport->name);
    BRAID_CHECK_GOTO(load_tuning(c, st), res, fail);
    if (c->nranks > 1) {
        /* Every rank must choose as rank 0 does, or the ranks would run different algorithms
         * and hang: check it once here. */
        uint8_t mine[DIGEST_BYTES];
        digest(st, mine);
        all = malloc((size_t)c->nranks * sizeof(mine));
        if (!all) {
            res = braid_set_error(BRAID_ERR_NOMEM, "out of memory checking algorithm choices");
            goto fail;
        }
        BRAID_CHECK_GOTO(braid_boot_allgather(c->boot, mine, all, sizeof(mine)), res, fail);
        for (int r = 1; r < c->nranks; r++) {
            const uint8_t *d = all + (size_t)r * sizeof(mine);
            if (!memcmp(d, all, sizeof(mine))) continue;
            res = braid_set_error(BRAID_ERR_INVALID_USAGE,
                                  "rank %d would choose collective algorithms differently from "
                                  "rank 0 (BRAID_ALGO=%s there, %s on rank 0): set the same "
                                  "BRAID_ALGO on every rank",
                                  r, braid_algo_name((int)d[0] - 1),
                                  braid_algo_name((int)all[0] - 1));
            goto fail;
        }
    }
    if (st->forced == BRAID_ALGO_TREE)
        braid_info(TUNING,
                   "BRAID_ALGO=tree: broadcast and reduce use the binomial tree%s, every "
                   "other collective the ring",
                   c->nranks > BRAID_TREE_MAX_RANKS ? " (not over 64 ranks: the ring here)" : "");
    if (c->rank == 0 && !braid_split_is_internal() &&
        braid_log_enabled(BRAID_LOG_INFO, BRAID_SUBSYS_TUNING))
        log_table(st);
    free(all);
    c->algo_state = st;
    return BRAID_SUCCESS;
fail:
    free(all);
    state_free(st);
    return res;
}

void braid_algo_comm_abort(struct braid_comm *c)
{
    braid_algo_state_t *st = c->algo_state;
    if (!st) return;
    /* hier_setup may be publishing them on another thread */
    pthread_mutex_lock(&st->sub_lock);
    if (st->intra) braid_comm_abort(st->intra);
    if (st->inter) braid_comm_abort(st->inter);
    pthread_mutex_unlock(&st->sub_lock);
}

void braid_algo_comm_free(struct braid_comm *c)
{
    braid_algo_state_t *st = c->algo_state;
    if (!st) return;
    state_free(st);
    c->algo_state = NULL;
}

braid_result_t braid_algo_execute(struct braid_comm *c, const braid_op_args_t *a, uint32_t seq)
{
    braid_algo_state_t *st = c->algo_state;
    if (!st || c->nranks == 1 || a->coll == BRAID_COLL_BARRIER) return braid_engine_run(c, a, seq);
    int algo = pick(st, a->coll, a->count, braid_dtype_size(a->dtype));
    if (st->forced != BRAID_ALGO_AUTO && algo != st->forced)
        braid_debug(TUNING,
                    "BRAID_ALGO=%s does not apply to %s #%u (count %zu, %d host(s), %d..%d ranks "
                    "per host): running the ring",
                    braid_algo_name(st->forced), braid_coll_name(a->coll), seq, a->count,
                    st->model.nhosts, st->model.min_local, st->model.max_local);
    braid_trace(TUNING, "%s #%u count %zu: %s", braid_coll_name(a->coll), seq, a->count,
                braid_algo_name(algo));
    st->runs[algo]++;
    c->tl_algo = algo;
    if (algo == BRAID_ALGO_HIER) return braid_hier_run(c, st, a, seq);
    if (algo == BRAID_ALGO_RECDBL) return braid_engine_run_plan(c, a, seq, BRAID_PLAN_RECDBL);
    if (algo == BRAID_ALGO_TREE) return braid_engine_run_plan(c, a, seq, BRAID_PLAN_TREE);
    if (algo == BRAID_ALGO_DIRECT) return braid_direct_run(c, a, seq);
    return braid_engine_run(c, a, seq);
}
