/* Hierarchical all-reduce (and broadcast / reduce-scatter / reduce, at the end of the file),
 * composed of collectives on two sub-communicators made with braid_comm_split on first use
 * (collective over the parent, like the collective itself): intra  the L ranks of this host, ranked
 * by parent rank (= the local index lr); inter  the H ranks with this rank's local index, one per
 * host, ranked by host.
 *
 * Definitions: count N elements, L ranks per host (every host the same; select.c falls back
 * to the flat ring otherwise), block size C = floor(N / L), tail = the last N - L*C (< L)
 * elements. Block b is [b*C, (b+1)*C); this rank owns block lr.
 *   1. intra reduce-scatter of blocks 0..L-1 into out[lr*C ..) (sum for avg)
 *   2. inter all-reduce of block lr in place: L rings, one per local index, run concurrently
 *      (each host's links all work); for avg, the owner then divides by n once (a float16,
 *      bfloat16 or float8 avg arrives here as the sum of inputs already scaled by 1/n,
 *      core/redop.h)
 *   3. intra all-gather of the blocks in place (out[lr*C ..) is the rank's own slot)
 *   4. the tail, if any, by a flat ring all-reduce on the parent (a few elements)
 * Each element is reduced in one fixed order (the intra ring, then the inter ring) by its
 * owner and copied to the others, so every rank ends with bit-identical values.
 *
 * Pipelining: from 2 x HIER_SEG_BYTES up, the body is cut into nseg contiguous segments (each
 * a multiple of L elements, at most HIER_MAX_SEGS) and steps 1-3 run per segment, with the
 * inter-host all-reduce of segment s on the inter sub-communicator's worker thread while this
 * thread runs the intra-host reduce-scatter of segment s+1 and the all-gather of segment s-1:
 *   RS(0); AR(0) async; for s: { RS(s+1); wait AR(s); AR(s+1) async; AG(s) }
 * Segments are disjoint ranges of the buffers, so the overlapping steps never touch the same
 * memory; the segmentation depends only on count and L, so all ranks agree. */
#include "algos/algo.h"
#include "core/engine.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/split.h"
#include "core/worker.h"
#include "reduce/reduce.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ranks of host h, and the position of host h among the hosts that have a local index lr
 * (its rank in the inter-host sub-communicator of lr). */
static int inter_rank_of(const braid_topo_t *t, int h, int lr)
{
    int k = 0;
    for (int g = 0; g < h; g++)
        k += t->host_size[g] > lr;
    return k;
}

static int inter_size_of(const braid_topo_t *t, int lr)
{
    return inter_rank_of(t, t->nhosts, lr);
}

/* The sub-communicators cost their algorithms with the parent's constants (the same on every
 * rank), whatever tuning file their own rank 0 may have read. */
void braid_hier_share_model(braid_algo_state_t *st)
{
    struct braid_comm *subs[2] = {st->intra, st->inter};
    for (int i = 0; i < 2; i++) {
        braid_algo_state_t *ss = subs[i] ? subs[i]->algo_state : NULL;
        if (!ss) continue;
        ss->model.intra = st->model.intra;
        ss->model.inter = st->model.inter;
        ss->model.copy = st->model.copy;
        ss->model.launch_us = st->model.launch_us;
        ss->model.oversub_us = st->model.oversub_us;
        ss->model.net_overlap = st->model.net_overlap;
        /* the parent's ranks all share their machines' cpus while hier runs */
        ss->model.host_ranks = st->model.host_ranks;
        ss->model.cores = st->model.cores;
        braid_algo_pick_forget(ss);
    }
}

#define HIER_MARK "[hier] "

/* The sub-communicators' waits run this while they sleep (braid_comm_watch): the parent's call
 * has no plan of its own on the parent's connections (but the all-reduce's tail), where the
 * other ranks' descriptors arrive, so a rank that rejected its call or runs another one (a
 * different count picks the ring) would otherwise leave this rank waiting in a stage until the
 * timeout. The message names parent ranks already (marked: hier_fail keeps it as it is). */
static braid_result_t hier_watch(struct braid_comm *c, uint64_t idle_ns)
{
    if (atomic_load(&c->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, HIER_MARK "%s", braid_comm_abort_reason(c));
    braid_algo_state_t *st = c->algo_state; /* NULL while init measures (tune.c) */
    if (!st || !st->call || atomic_exchange(&st->watching, 1)) return BRAID_SUCCESS;
    braid_result_t res =
        braid_engine_check_parent(c, st->call, st->has_part ? &st->call_part : NULL, st->call_seq);
    /* A rank that failed the call (found the mismatch, or was told) tells c's peers, some of
     * which wait in a sub-communicator it has no part in: the notice is on c's connections.
     * After the grace of the engine's own check (comm.h). */
    if (res == BRAID_SUCCESS && idle_ns >= BRAID_PEER_FAILURE_GRACE_NS)
        res = braid_comm_peer_failure(c);
    atomic_store(&st->watching, 0);
    if (res == BRAID_SUCCESS) return res;
    char why[900];
    snprintf(why, sizeof(why), "%s", braid_last_error());
    return braid_set_error(res, HIER_MARK "%s", why);
}

/* Every rank's outcome of the setup, agreed over the parent's bootstrap. */
typedef struct {
    int32_t res;
    int32_t stage; /* where it failed: 1 a split, 2 the check of the shape (which fails when
                    * another rank's split did) */
    char why[152];
} hier_status_t;

/* The first rank whose setup failed (at the earliest stage), as this rank's error (res and
 * message); BRAID_SUCCESS when none did. An allgather over c's bootstrap: every rank takes
 * part, whatever its res. */
static braid_result_t hier_agree(struct braid_comm *c, braid_result_t res, int stage)
{
    hier_status_t mine;
    memset(&mine, 0, sizeof(mine));
    mine.res = res;
    mine.stage = stage;
    if (res < 0) snprintf(mine.why, sizeof(mine.why), "%s", braid_last_error());
    hier_status_t *all = calloc((size_t)c->nranks, sizeof(*all));
    if (!all) {
        res = braid_set_error(BRAID_ERR_NOMEM, "hier: out of memory for %d ranks", c->nranks);
        braid_boot_report_code(c->boot, res, braid_last_error()); /* fails the others' allgather */
        return res;
    }
    braid_result_t ar = braid_boot_allgather(c->boot, &mine, all, sizeof(mine));
    int first = -1;
    for (int r = 0; ar == BRAID_SUCCESS && r < c->nranks; r++)
        if (all[r].res < 0 && (first < 0 || all[r].stage < all[first].stage)) first = r;
    if (first == c->rank)
        ar = braid_set_error(res, "%s", mine.why);
    else if (first >= 0)
        ar = braid_set_error(all[first].res,
                             "hier: rank %d could not make its sub-communicators: %.*s", first,
                             (int)sizeof(all[first].why) - 1, all[first].why);
    free(all);
    return ar;
}

/* The sub-communicators, made on first use by two braid_comm_split of the parent (collective
 * over its bootstrap). Every rank runs both splits and then agrees on the outcome, so a
 * failure on some ranks (a file descriptor limit, /dev/shm) fails every rank alike and at once,
 * none waiting for the others in the bootstrap. */
static braid_result_t hier_setup(struct braid_comm *c, braid_algo_state_t *st,
                                 const braid_op_args_t *a, uint32_t seq)
{
    const braid_topo_t *t = &st->topo;
    int h = t->host[c->rank], lr = t->local_rank[c->rank];
    /* The bootstrap carries no call numbers: the call's descriptor exchange first, on the
     * data connections, so a rank in another call (a split, a ring collective, a rejected
     * call) is a mismatch naming both calls rather than a wait in the bootstrap (as split.c's
     * split). Ranks past it wait in the bootstrap: the report fails it for them. */
    braid_result_t res = braid_engine_hello(c, a, seq);
    if (res < 0) {
        braid_boot_report_code(c->boot, res, braid_last_error());
        return res;
    }
    struct braid_comm *intra = NULL, *inter = NULL;
    /* the parent's agreed settings, whatever a rank's environment says by now */
    braid_settings_inherit(c);
    res = braid_comm_split_internal(c, h, c->rank, 1, &intra);
    /* The second split runs whatever the first gave (it is collective); a rank whose first
     * failed joins no group, nor do the local indices that no hier algorithm uses between
     * hosts (uneven hosts: lr >= the fewest ranks per host; broadcast and reduce lead with
     * lower ones). */
    int color = res == BRAID_SUCCESS && lr < t->min_local ? lr : -1;
    braid_result_t r2 = braid_comm_split_internal(c, color, h, 1, &inter);
    braid_settings_inherit(NULL);
    if (res == BRAID_SUCCESS) res = r2;
    if (res == BRAID_SUCCESS && atomic_load(&c->aborted))
        res = braid_set_error(BRAID_ERR_ABORTED, "hier: %s", braid_comm_abort_reason(c));
    int stage = res < 0 ? 1 : 2;
    if (res == BRAID_SUCCESS && (!intra || intra->rank != lr || intra->nranks != t->host_size[h] ||
                                 (color >= 0) != (inter != NULL) ||
                                 (inter && (inter->rank != inter_rank_of(t, h, lr) ||
                                            inter->nranks != inter_size_of(t, lr)))))
        res =
            braid_set_error(BRAID_ERR_INTERNAL,
                            "hier: sub-communicators have the wrong shape (intra %d/%d, inter "
                            "%d/%d for local rank %d of host %d of %d)",
                            intra ? intra->rank : -1, intra ? intra->nranks : 0,
                            inter ? inter->rank : -1, inter ? inter->nranks : 0, lr, h, t->nhosts);
    res = hier_agree(c, res, stage);
    if (res < 0) {
        char why[1024];
        snprintf(why, sizeof(why), "%s", braid_last_error());
        if (intra) braid_comm_destroy(intra);
        if (inter) braid_comm_destroy(inter);
        return braid_set_error(res, "%s", why);
    }
    for (int i = 0; i < 2; i++) {
        struct braid_comm *sub = i ? inter : intra;
        if (!sub) continue;
        sub->watch = hier_watch;
        sub->watch_parent = c;
    }
    pthread_mutex_lock(&st->sub_lock);
    st->intra = intra;
    st->inter = inter;
    pthread_mutex_unlock(&st->sub_lock);
    /* braid_comm_abort sets the flag before it aborts the published sub-communicators */
    if (atomic_load(&c->aborted)) {
        braid_algo_comm_abort(c);
        return braid_set_error(BRAID_ERR_ABORTED, "hier: %s", braid_comm_abort_reason(c));
    }
    braid_hier_share_model(st);
    braid_debug(TUNING, "hier: rank %d is local rank %d of host %d (%d ranks), %d hosts", c->rank,
                lr, h, intra->nranks, t->nhosts);
    st->hier_ready = 1;
    return BRAID_SUCCESS;
}

/* Parent ranks of a sub-communicator's ranks 0, 1, ...: of host `which` (intra) or of local
 * index `which` in host order (inter). Returns how many (map has t->nranks entries). */
static int sub_map(const braid_topo_t *t, int intra, int which, int *map)
{
    if (intra) return braid_topo_host_ranks(t, which, map);
    int k = 0;
    for (int h = 0; h < t->nhosts; h++)
        for (int r = 0; r < t->nranks; r++)
            if (t->host[r] == h && t->local_rank[r] == which) map[k++] = r;
    return k;
}

size_t braid_hier_rename(const char *in, const int *map, int nmap, char *out, size_t len)
{
    size_t o = 0;
    const char *stop = strstr(in, HIER_MARK);
    o += (size_t)snprintf(out, len, "%s", HIER_MARK);
    for (const char *p = in; *p && o + 1 < len;) {
        if (p == stop) { /* already in parent ranks: copy the rest, without the mark */
            o += (size_t)snprintf(out + o, len - o, "%s", p + strlen(HIER_MARK));
            break;
        }
        int word = !strncmp(p, "rank ", 5) && (p == in || !isalpha((unsigned char)p[-1]));
        if (word && isdigit((unsigned char)p[5])) {
            char *end;
            long r = strtol(p + 5, &end, 10);
            if (r >= 0 && r < nmap) {
                o += (size_t)snprintf(out + o, len - o, "rank %d", map[r]);
                p = end;
                continue;
            }
        }
        out[o++] = *p++;
        out[o] = '\0';
    }
    return o < len ? o : len - 1;
}

/* A failure in one sub-communicator must reach ranks waiting in the other one. Messages from
 * a sub-communicator name its own ranks: they are renamed to this communicator's ranks (the
 * ones the user knows) and marked, so a message forwarded between ranks is renamed once. */
static void hier_fail(struct braid_comm *c, braid_algo_state_t *st, braid_result_t res)
{
    char why[1024];
    const braid_topo_t *t = &st->topo;
    int *map = st->failed_in ? malloc((size_t)t->nranks * sizeof(int)) : NULL;
    if (map) {
        int intra = st->failed_in == 1;
        int nmap = sub_map(t, intra, intra ? t->host[c->rank] : t->local_rank[c->rank], map);
        braid_hier_rename(braid_last_error(), map, nmap, why, sizeof(why));
    } else {
        snprintf(why, sizeof(why), "%s", braid_last_error());
    }
    free(map);
    st->failed_in = 0;
    struct braid_comm *subs[2] = {st->intra, st->inter};
    for (int i = 0; i < 2; i++) {
        if (!subs[i]) continue;
        braid_comm_set_error(subs[i], res, "%s", why);
        braid_comm_fail_peers(subs[i], res, why);
    }
    braid_set_error(res, "%s", why);
}

/* Runs a collective on sub-communicator sub (st->intra or st->inter), noting which one. */
static braid_result_t on_sub(braid_algo_state_t *st, struct braid_comm *sub,
                             const braid_op_args_t *a)
{
    struct braid_comm *c = sub->watch_parent;
    if (atomic_load(&c->aborted)) /* its stages would not see it before they wait */
        return braid_set_error(BRAID_ERR_ABORTED, "%s #%u: %s", braid_coll_name(st->call->coll),
                               st->call_seq, braid_comm_abort_reason(c));
    st->failed_in = sub == st->intra ? 1 : 2;
    braid_result_t res = braid_coll_execute(sub, a);
    if (res == BRAID_SUCCESS) st->failed_in = 0;
    return res;
}

#define HIER_SEG_BYTES ((size_t)4 << 20)
#define HIER_MAX_SEGS 16

/* Steps 1-3 for the `count` elements (a multiple of L) at element offset base. */
static braid_op_args_t seg_args(const braid_op_args_t *a, int coll, size_t base, size_t count,
                                int L, int lr)
{
    size_t es = braid_dtype_size(a->dtype), C = count / (size_t)L;
    char *seg_out = (char *)a->recvbuf + base * es, *mine = seg_out + (size_t)lr * C * es;
    braid_op_args_t x = {.coll = coll,
                         .sendbuf = mine,
                         .recvbuf = mine,
                         .count = C,
                         .dtype = a->dtype,
                         .op = a->op == BRAID_AVG ? BRAID_SUM : a->op,
                         .root = -1,
                         .fused = a->fused}; /* a fused group's layout is checked here */
    if (coll == BRAID_COLL_REDUCE_SCATTER) x.sendbuf = (const char *)a->sendbuf + base * es;
    if (coll == BRAID_COLL_ALLGATHER) x.recvbuf = seg_out;
    return x;
}

/* The inter-host all-reduce of a segment, queued on the inter sub-communicator's worker. */
static braid_result_t submit_ar(braid_algo_state_t *st, const braid_op_args_t *ar,
                                struct braid_request **req_p)
{
    struct braid_request *req = calloc(1, sizeof(*req));
    if (!req) return braid_set_error(BRAID_ERR_NOMEM, "hier: out of memory for a request");
    req->args = *ar;
    req->comm = st->inter;
    braid_result_t res = braid_worker_submit(st->inter, req);
    if (res < 0) {
        free(req);
        return res;
    }
    *req_p = req;
    return BRAID_SUCCESS;
}

static braid_result_t hier_pipelined(struct braid_comm *c, braid_algo_state_t *st,
                                     const braid_op_args_t *a, size_t body, int nseg)
{
    int L = st->intra->nranks, lr = st->intra->rank;
    size_t per = body / (size_t)nseg / (size_t)L * (size_t)L;
    braid_debug(TUNING, "hier all-reduce of %zu elements: %d pipelined segments of %zu", body, nseg,
                per);
    struct braid_request *pending = NULL; /* the in-flight AR, of segment `pend_seg` */
    braid_result_t res = BRAID_SUCCESS;
#define SEG_BASE(s) ((size_t)(s)*per)
#define SEG_COUNT(s) ((s) + 1 < nseg ? per : body - SEG_BASE(s))
    braid_op_args_t x = seg_args(a, BRAID_COLL_REDUCE_SCATTER, 0, SEG_COUNT(0), L, lr);
    BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
    x = seg_args(a, BRAID_COLL_ALLREDUCE, 0, SEG_COUNT(0), L, lr);
    BRAID_CHECK_GOTO(submit_ar(st, &x, &pending), res, fail);
    for (int s = 0; s < nseg; s++) {
        if (s + 1 < nseg) {
            x = seg_args(a, BRAID_COLL_REDUCE_SCATTER, SEG_BASE(s + 1), SEG_COUNT(s + 1), L, lr);
            BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
        }
        struct braid_request *req = pending;
        pending = NULL;
        st->failed_in = 2;
        BRAID_CHECK_GOTO(braid_wait(req), res, fail);
        st->failed_in = 0;
        braid_op_args_t ar = seg_args(a, BRAID_COLL_ALLREDUCE, SEG_BASE(s), SEG_COUNT(s), L, lr);
        if (a->op == BRAID_AVG)
            braid_reduce_finalize(a->dtype, BRAID_AVG, ar.recvbuf, ar.recvbuf, ar.count, c->nranks);
        if (s + 1 < nseg) {
            x = seg_args(a, BRAID_COLL_ALLREDUCE, SEG_BASE(s + 1), SEG_COUNT(s + 1), L, lr);
            BRAID_CHECK_GOTO(submit_ar(st, &x, &pending), res, fail);
        }
        x = seg_args(a, BRAID_COLL_ALLGATHER, SEG_BASE(s), SEG_COUNT(s), L, lr);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
    }
#undef SEG_BASE
#undef SEG_COUNT
    return BRAID_SUCCESS;
fail:
    /* Nothing may still use the buffers when the call returns: fail both sub-communicators
     * (the queued all-reduce then ends at once) and wait for it. */
    hier_fail(c, st, res);
    if (pending) {
        char keep[600];
        snprintf(keep, sizeof(keep), "%s", braid_last_error());
        braid_wait(pending);
        braid_set_error(res, "%s", keep);
    }
    return res;
}

static braid_result_t hier_allreduce(struct braid_comm *c, braid_algo_state_t *st,
                                     const braid_op_args_t *a, uint32_t seq)
{
    braid_result_t res = BRAID_SUCCESS;
    size_t es = braid_dtype_size(a->dtype);
    int L = st->intra->nranks, lr = st->intra->rank;
    size_t C = a->count / (size_t)L, body = C * (size_t)L;
    char *out = a->recvbuf;
    char *mine = out + (size_t)lr * C * es;
    size_t nseg = body * es / HIER_SEG_BYTES;
    if (nseg > HIER_MAX_SEGS) nseg = HIER_MAX_SEGS;
    if (nseg >= 2 && C >= nseg) {
        res = hier_pipelined(c, st, a, body, (int)nseg);
        if (res < 0) return res; /* hier_pipelined reported it */
    } else if (C > 0) {
        braid_op_args_t x = seg_args(a, BRAID_COLL_REDUCE_SCATTER, 0, body, L, lr);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
        x = seg_args(a, BRAID_COLL_ALLREDUCE, 0, body, L, lr);
        BRAID_CHECK_GOTO(on_sub(st, st->inter, &x), res, fail);
        if (a->op == BRAID_AVG)
            braid_reduce_finalize(a->dtype, BRAID_AVG, mine, mine, C, c->nranks);
        x = seg_args(a, BRAID_COLL_ALLGATHER, 0, body, L, lr);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
    }
    if (body < a->count) {
        braid_op_args_t tail = *a;
        tail.sendbuf = (const char *)a->sendbuf + body * es;
        tail.recvbuf = out + body * es;
        tail.count = a->count - body;
        BRAID_CHECK_GOTO(braid_engine_run(c, &tail, seq), res, fail);
    }
    return BRAID_SUCCESS;
fail:
    hier_fail(c, st, res);
    return res;
}

/* A stage of parent call a: a fused group run's layout goes with it, so the stages check it
 * (core/group_fuse.c; the parent call itself exchanges no descriptor). */
static braid_op_args_t sub_args(const braid_op_args_t *a, int coll, const void *in, void *out,
                                size_t count, braid_redop_t op, int root)
{
    return (braid_op_args_t){.coll = coll,
                             .sendbuf = in,
                             .recvbuf = out,
                             .count = count,
                             .dtype = a->dtype,
                             .op = op,
                             .root = root,
                             .fused = a->fused};
}

/* Rooted collectives (broadcast, reduce): this rank's host h and local index lr, the root's
 * host hr and local index jr, and the local index of the leaders that carry the inter-host
 * step (jr when every host has that index, else 0). */
typedef struct {
    int h, lr, hr, jr, lead;
} hier_roles_t;

static hier_roles_t roles(const struct braid_comm *c, const braid_algo_state_t *st, int root)
{
    const braid_topo_t *t = &st->topo;
    hier_roles_t r = {t->host[c->rank], t->local_rank[c->rank], t->host[root], t->local_rank[root],
                      0};
    r.lead = r.jr < t->min_local ? r.jr : 0;
    return r;
}

static braid_result_t hier_broadcast(struct braid_comm *c, braid_algo_state_t *st,
                                     const braid_op_args_t *a, uint32_t seq)
{
    (void)seq;
    braid_result_t res = BRAID_SUCCESS;
    const braid_topo_t *t = &st->topo;
    /* leaders: local index jr on every host when every host has one, else local index 0
     * after the root's host has the data (an extra broadcast within the root's host) */
    hier_roles_t ro = roles(c, st, a->root);
    int h = ro.h, lr = ro.lr, hr = ro.hr, jr = ro.jr, lead = ro.lead;
    const void *src = c->rank == a->root ? a->sendbuf : a->recvbuf;
    if (lead != jr && h == hr) {
        braid_op_args_t b = sub_args(a, BRAID_COLL_BROADCAST, src, a->recvbuf, a->count, a->op, jr);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &b), res, fail);
        src = a->recvbuf;
    }
    if (lr == lead) {
        braid_op_args_t b = sub_args(a, BRAID_COLL_BROADCAST, src, a->recvbuf, a->count, a->op,
                                     inter_rank_of(t, hr, lead));
        BRAID_CHECK_GOTO(on_sub(st, st->inter, &b), res, fail);
    }
    if (lead == jr || h != hr) {
        braid_op_args_t b =
            sub_args(a, BRAID_COLL_BROADCAST, a->recvbuf, a->recvbuf, a->count, a->op, lead);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &b), res, fail);
    }
    return BRAID_SUCCESS;
fail:
    hier_fail(c, st, res);
    return res;
}

/* Scratch of at least `bytes`, kept for the communicator's next calls (collectives on one
 * communicator run one at a time). */
static void *scratch(braid_algo_state_t *st, size_t bytes)
{
    if (st->scratch_bytes >= bytes) return st->scratch;
    void *p = realloc(st->scratch, bytes);
    if (!p) return NULL;
    st->scratch = p;
    st->scratch_bytes = bytes;
    return p;
}

static braid_result_t hier_reduce_scatter(struct braid_comm *c, braid_algo_state_t *st,
                                          const braid_op_args_t *a, uint32_t seq)
{
    (void)seq;
    braid_result_t res = BRAID_SUCCESS;
    const braid_topo_t *t = &st->topo;
    int H = st->inter->nranks, lr = st->intra->rank;
    size_t es = braid_dtype_size(a->dtype), N = a->count, blk = N * es;
    char *tmp = scratch(st, (size_t)c->nranks * blk);
    if (!tmp) {
        res = braid_set_error(BRAID_ERR_NOMEM, "hier reduce_scatter: out of memory for %zu bytes",
                              (size_t)c->nranks * blk);
        goto fail;
    }
    /* Pack: rank r's block goes to position local_rank(r) * H + host(r). */
    for (int r = 0; r < c->nranks; r++)
        memcpy(tmp + ((size_t)t->local_rank[r] * (size_t)H + (size_t)t->host[r]) * blk,
               (const char *)a->sendbuf + (size_t)r * blk, blk);
    braid_redop_t op = a->op == BRAID_AVG ? BRAID_SUM : a->op;
    char *mine = tmp + (size_t)lr * (size_t)H * blk;
    braid_op_args_t rs = sub_args(a, BRAID_COLL_REDUCE_SCATTER, tmp, mine, (size_t)H * N, op, -1);
    BRAID_CHECK_GOTO(on_sub(st, st->intra, &rs), res, fail);
    rs = sub_args(a, BRAID_COLL_REDUCE_SCATTER, mine, a->recvbuf, N, op, -1);
    BRAID_CHECK_GOTO(on_sub(st, st->inter, &rs), res, fail);
    if (a->op == BRAID_AVG)
        braid_reduce_finalize(a->dtype, BRAID_AVG, a->recvbuf, a->recvbuf, N, c->nranks);
    return BRAID_SUCCESS;
fail:
    hier_fail(c, st, res);
    return res;
}

/* Reduce: the broadcast mirrored. The leaders are the ranks with the root's local index jr
 * when every host has one, else local rank 0 of every host.
 *   1. every host reduces within itself to its leader (but the root's host when its leader is
 *      not the root);
 *   2. the leaders reduce across hosts to the leader of the root's host (the root itself
 *      when the leader is jr);
 *   3. when the leader is not jr, the root's host reduces within itself to the root, its
 *      leader contributing the result of step 2 (its own input is in it already).
 * Every input is reduced once; the sub-collectives sum for avg and the root divides by n once.
 * Leaders other than the root accumulate in scratch memory: only the root's recvbuf is read or
 * written, and a host of one rank passes its input on without a step 1. */
static braid_result_t hier_reduce(struct braid_comm *c, braid_algo_state_t *st,
                                  const braid_op_args_t *a, uint32_t seq)
{
    (void)seq;
    braid_result_t res = BRAID_SUCCESS;
    const braid_topo_t *t = &st->topo;
    hier_roles_t ro = roles(c, st, a->root);
    int h = ro.h, lr = ro.lr, hr = ro.hr, jr = ro.jr, lead = ro.lead, is_root = c->rank == a->root;
    braid_redop_t op = a->op == BRAID_AVG ? BRAID_SUM : a->op;
    size_t bytes = a->count * braid_dtype_size(a->dtype);
    const void *part = a->sendbuf; /* what this rank contributes to its next step */
    void *acc = is_root ? a->recvbuf : NULL;
    if (lr == lead && !is_root && !(acc = scratch(st, bytes))) {
        res = braid_set_error(BRAID_ERR_NOMEM, "hier reduce: out of memory for %zu bytes", bytes);
        goto fail;
    }
    if ((lead == jr || h != hr) && st->intra->nranks > 1) {
        braid_op_args_t x =
            sub_args(a, BRAID_COLL_REDUCE, a->sendbuf, lr == lead ? acc : NULL, a->count, op, lead);
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
        if (lr == lead) part = acc;
    }
    if (lr == lead) {
        braid_op_args_t x = sub_args(a, BRAID_COLL_REDUCE, part, h == hr ? acc : NULL, a->count, op,
                                     inter_rank_of(t, hr, lead));
        BRAID_CHECK_GOTO(on_sub(st, st->inter, &x), res, fail);
        part = acc;
    }
    if (lead != jr && h == hr) {
        braid_op_args_t x = sub_args(a, BRAID_COLL_REDUCE, part, acc, a->count, op, jr);
        if (lr == lead) x.recvbuf = NULL; /* the leader is not the root here */
        BRAID_CHECK_GOTO(on_sub(st, st->intra, &x), res, fail);
    }
    if (is_root && a->op == BRAID_AVG)
        braid_reduce_finalize(a->dtype, BRAID_AVG, a->recvbuf, a->recvbuf, a->count, c->nranks);
    return BRAID_SUCCESS;
fail:
    hier_fail(c, st, res);
    return res;
}

/* Scratch memory kept between calls up to this size; a larger buffer (reduce-scatter packs
 * n x its output) is freed when its call ends. */
#define HIER_SCRATCH_KEEP ((size_t)1 << 20)

braid_result_t braid_hier_run(struct braid_comm *c, braid_algo_state_t *st,
                              const braid_op_args_t *a, uint32_t seq)
{
    if (!st->hier_ready) BRAID_CHECK(hier_setup(c, st, a, seq));
    /* the stages' waits check this call on c (hier_watch) */
    st->call_seq = seq;
    st->has_part = 0;
    if (a->coll == BRAID_COLL_ALLREDUCE) {
        size_t L = (size_t)st->intra->nranks, body = a->count / L * L;
        st->has_part = body < a->count;
        st->call_part = *a;
        st->call_part.count = a->count - body;
    }
    st->call = a;
    braid_result_t res;
    if (a->coll == BRAID_COLL_BROADCAST)
        res = hier_broadcast(c, st, a, seq);
    else if (a->coll == BRAID_COLL_REDUCE)
        res = hier_reduce(c, st, a, seq);
    else if (a->coll == BRAID_COLL_REDUCE_SCATTER)
        res = hier_reduce_scatter(c, st, a, seq);
    else
        res = hier_allreduce(c, st, a, seq);
    st->call = NULL;
    if (st->scratch_bytes > HIER_SCRATCH_KEEP) {
        free(st->scratch);
        st->scratch = NULL;
        st->scratch_bytes = 0;
    }
    return res;
}
