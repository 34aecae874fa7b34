/* braid_send/braid_recv (and the i-forms), groups, and the worker's point-to-point tasks.
 *
 * Where a call runs. A blocking call runs on the caller's thread when the communicator's worker
 * has nothing queued, else it is queued behind the worker's operations and waited for (calls
 * on a communicator stay in call order). An i-form call is always queued. The worker runs a
 * queued send or receive together with every send and receive queued right behind it, and
 * keeps taking those that arrive while the batch runs (braid_p2p_run's pull), so an isend to
 * one rank and an irecv from another progress at the same time.
 *
 * Groups. braid_group_start/end keep a per-thread depth; calls inside the outermost group are
 * checked, then kept per communicator as items (their i-forms get a request that is not
 * queued). The outermost braid_group_end runs each communicator's items: its collectives in
 * call order, then all of its sends and receives as one batch. With one communicator and an
 * idle worker this happens on the caller's thread; otherwise each communicator's items go to
 * its worker as one task and group end waits for all of them (communicators run concurrently,
 * e.g. several ranks driven by one thread). */
#include "core/log.h"
#include "core/p2p.h"
#include "core/worker.h"
#include "cuda/cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- per-thread group state ------------------------------------------------------------- */
typedef struct {
    struct braid_comm *comm;
    braid_group_item_t *items;
    int n, cap;
} group_part_t;

static __thread struct {
    int depth;
    int ncalls;
    braid_result_t err; /* the first call that failed its checks */
    char errmsg[1024];
    group_part_t *parts;
    int nparts, cap;
} group;

int braid_group_depth(void)
{
    return group.depth;
}

int braid_group_holds(const struct braid_request *req)
{
    for (int i = 0; req && group.depth > 0 && i < group.nparts; i++)
        for (int j = 0; j < group.parts[i].n; j++)
            if (group.parts[i].items[j].req == req) return 1;
    return 0;
}

static void item_free(braid_group_item_t *it)
{
    if (it->kind == BRAID_ITEM_PCOLL) braid_pcoll_free(&it->pc);
}

/* Adds a checked call to the group (it->call is set here). */
static braid_result_t group_add(struct braid_comm *comm, braid_group_item_t *it,
                                braid_request_t *req_p)
{
    group_part_t *part = NULL;
    for (int i = 0; i < group.nparts && !part; i++)
        if (group.parts[i].comm == comm) part = &group.parts[i];
    if (!part) {
        if (group.nparts == group.cap) {
            int cap = group.cap ? group.cap * 2 : 4;
            group_part_t *n = realloc(group.parts, (size_t)cap * sizeof(*n));
            if (!n) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for a group");
            group.parts = n;
            group.cap = cap;
        }
        part = &group.parts[group.nparts++];
        memset(part, 0, sizeof(*part));
        part->comm = comm;
    }
    if (part->n == part->cap) {
        /* From 4 (under 1 KiB): glibc's per-thread cache serves it; the 8 items of 328 bytes
         * before went through its bins, consolidating them, on every group (send + receive of
         * 8 B, 1 rank: a third of the call's time in malloc and free). */
        int cap = part->cap ? part->cap * 2 : 4;
        braid_group_item_t *n = realloc(part->items, (size_t)cap * sizeof(*n));
        if (!n) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for a group");
        part->items = n;
        part->cap = cap;
    }
    struct braid_request *req = NULL;
    if (req_p) {
        req = calloc(1, sizeof(*req));
        if (!req) return braid_set_error(BRAID_ERR_NOMEM, "out of memory for a request");
        req->comm = comm;
    }
    it->req = req;
    it->call = group.ncalls;
    if (it->kind == BRAID_ITEM_P2P) it->op.call = it->call;
    part->items[part->n++] = *it;
    if (req_p) *req_p = req;
    return BRAID_SUCCESS;
}

/* Every call made while a group is open counts (1-based), so an error can name it. */
static int group_count_call(void)
{
    return group.depth > 0 ? ++group.ncalls : 0;
}

static braid_result_t group_fail(braid_result_t res, const char *what)
{
    if (!group.err) {
        group.err = res;
        snprintf(group.errmsg, sizeof(group.errmsg), "group call %d (%s): %s", group.ncalls, what,
                 braid_last_error());
    }
    return res;
}

braid_result_t braid_group_add_coll(struct braid_comm *comm, const braid_op_args_t *a,
                                    braid_request_t *req_p)
{
    braid_group_item_t it = {.kind = BRAID_ITEM_COLL, .args = *a};
    braid_result_t res = group_add(comm, &it, req_p);
    return res < 0 ? group_fail(res, braid_coll_name(a->coll)) : res;
}

braid_result_t braid_group_add_pcoll(struct braid_comm *comm, const braid_pcoll_t *pc,
                                     braid_request_t *req_p)
{
    braid_group_item_t it = {.kind = BRAID_ITEM_PCOLL, .pc = *pc};
    braid_result_t res = group_add(comm, &it, req_p);
    return res < 0 ? group_fail(res, braid_coll_name(pc->coll)) : res;
}

braid_result_t braid_group_add_rejected(struct braid_comm *comm, const braid_group_item_t *it,
                                        braid_result_t res)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", braid_last_error());
    braid_group_item_t r = *it;
    r.rejected = 1;
    if (r.kind == BRAID_ITEM_PCOLL) /* only its descriptor is told: no arrays */
        r.pc.sendcounts = r.pc.sdispls = r.pc.recvcounts = r.pc.rdispls = NULL;
    (void)group_add(comm, &r, NULL); /* out of memory: its peers are not told */
    braid_restore_error(msg);
    return res;
}

/* Called by every entry point that checks its arguments inside a group: counts the call and
 * records its error for group end. */
braid_result_t braid_group_note(braid_result_t res, const char *what)
{
    group_count_call();
    if (res < 0 && group.depth > 0) group_fail(res, what);
    return res;
}

braid_result_t braid_group_reject(braid_result_t err, const char *reason)
{
    braid_clear_error();
    if (group.depth <= 0)
        return braid_set_error(BRAID_ERR_INVALID_USAGE, "braid_group_reject: no group is open");
    if (err >= 0 || !reason)
        return braid_set_error(BRAID_ERR_INVALID_ARG,
                               "braid_group_reject: err=%d (must be an error), reason=%p", (int)err,
                               (const void *)reason);
    if (!group.err) { /* else the first failure stands (a call that failed its checks) */
        group.err = err;
        braid_str_fit(group.errmsg, sizeof(group.errmsg), reason);
    }
    return BRAID_SUCCESS;
}

braid_result_t braid_group_start(void)
{
    braid_clear_error();
    if (group.depth == 0) {
        group.ncalls = 0;
        group.err = BRAID_SUCCESS;
        group.errmsg[0] = 0;
        group.nparts = 0;
    }
    group.depth++;
    return BRAID_SUCCESS;
}

/* ---- running a communicator's part of a group ------------------------------------------- */
static void child_done(struct braid_comm *comm, braid_p2p_op_t *op, braid_result_t res, void *arg)
{
    (void)arg;
    braid_request_complete(comm, op->req, res, res < 0 ? braid_last_error() : "");
}

static braid_result_t check_comm_ok(struct braid_comm *comm)
{
    if (atomic_load(&comm->aborted))
        return braid_set_error(BRAID_ERR_ABORTED, "%s", braid_comm_abort_reason(comm));
    int err = atomic_load(&comm->error);
    if (err) return braid_set_error(err, "communicator failed earlier: %s", comm->errmsg);
    return BRAID_SUCCESS;
}

/* A group that a call's checks rejected (reject_res < 0, reject_msg its message): nothing is
 * issued, the peers are told (group_reject.c); the requests complete with the rejection.
 * Returns BRAID_SUCCESS, or the error of a peer whose calls did not match. */
static braid_result_t reject_items(struct braid_comm *comm, braid_group_item_t *items, int n,
                                   braid_result_t reject_res, const char *reject_msg)
{
    braid_result_t res = braid_group_reject_items(comm, items, n, reject_msg);
    char msg[1024];
    snprintf(msg, sizeof(msg), "not issued: %s", reject_msg);
    for (int i = 0; i < n; i++) {
        if (items[i].req) braid_request_complete(comm, items[i].req, reject_res, msg);
        items[i].req = NULL;
        item_free(&items[i]);
    }
    if (res < 0) braid_set_error(res, "%s", comm->errmsg);
    return res;
}

/* Runs one collective of a group and completes its request. */
static braid_result_t run_coll_item(struct braid_comm *comm, braid_group_item_t *it, char *msg,
                                    size_t msglen)
{
    braid_clear_error();
    braid_result_t res = it->kind == BRAID_ITEM_COLL ? braid_coll_execute(comm, &it->args)
                                                     : braid_pcoll_execute(comm, &it->pc, it->call);
    if (res < 0)
        snprintf(msg, msglen, "group call %d (%s): %s", it->call,
                 braid_coll_name(it->kind == BRAID_ITEM_COLL ? it->args.coll : it->pc.coll),
                 braid_last_error());
    if (it->req) braid_request_complete(comm, it->req, res, res < 0 ? msg : "");
    it->req = NULL;
    return res;
}

static braid_result_t run_items(struct braid_comm *comm, braid_group_item_t *items, int n,
                                braid_result_t reject_res, const char *reject_msg)
{
    if (reject_res < 0) return reject_items(comm, items, n, reject_res, reject_msg);
    braid_result_t res = BRAID_SUCCESS;
    char msg[1024];
    msg[0] = '\0'; /* not "" : that fills the whole 1 KiB on every call */
    braid_p2p_op_t ops_st[4];
    braid_p2p_batch_t b = BRAID_P2P_BATCH_ON(ops_st, 4);
    /* The collectives in call order, small all-reduces fused (group_fuse.c). */
    for (int i = 0; i < n && res >= 0; i++) {
        braid_group_item_t *it = &items[i];
        if (it->kind == BRAID_ITEM_P2P || it->fused) continue;
        braid_fuse_t f;
        if (braid_group_fuse_find(comm, items, n, i, &f)) {
            int fell_back;
            res = braid_group_fuse_run(comm, items, &f, &fell_back, msg, sizeof(msg));
            for (int j = 0; j < f.k && (res < 0 || !fell_back); j++) {
                braid_group_item_t *x = &items[f.idx[j]];
                x->fused = 1;
                if (x->req) braid_request_complete(comm, x->req, res, res < 0 ? msg : "");
                x->req = NULL;
            }
            for (int j = 0; j < f.k && res >= 0 && fell_back; j++) { /* one by one */
                items[f.idx[j]].fused = 1;
                res = run_coll_item(comm, &items[f.idx[j]], msg, sizeof(msg));
            }
            continue;
        }
        res = run_coll_item(comm, it, msg, sizeof(msg));
    }
    /* Then every send and receive at once. */
    for (int i = 0; i < n && res >= 0; i++)
        if (items[i].kind == BRAID_ITEM_P2P) {
            braid_p2p_op_t op = items[i].op;
            op.req = items[i].req;
            res = braid_p2p_batch_add(&b, &op);
            if (res >= 0) {
                items[i].req = NULL; /* the batch's now */
                continue;
            }
            /* Nothing of the batch runs: the peers' parts would wait for it, so they are told
             * (as for a batch that fails while it runs), and the requests it took complete
             * with the error here (those of the items left, below). */
            snprintf(msg, sizeof(msg), "%s", braid_last_error());
            braid_comm_fail_call(comm, res);
            for (int j = 0; j < b.nops; j++)
                if (b.ops[j].req) braid_request_complete(comm, b.ops[j].req, res, msg);
        }
    if (res >= 0 && b.nops) {
        res = check_comm_ok(comm);
        if (res >= 0) {
            braid_p2p_assign_seq(comm, &b, 0);
            res = braid_p2p_run(comm, &b, NULL, child_done, NULL); /* fails comm on error */
        } else {
            for (int i = 0; i < b.nops; i++)
                if (b.ops[i].req)
                    braid_request_complete(comm, b.ops[i].req, res, braid_last_error());
        }
        if (res < 0) snprintf(msg, sizeof(msg), "%s", braid_last_error());
    }
    braid_p2p_batch_free(&b);
    for (int i = 0; i < n; i++) { /* what did not run */
        if (items[i].req) braid_request_complete(comm, items[i].req, res, msg);
        item_free(&items[i]);
    }
    if (res < 0) braid_set_error(res, "%s", msg);
    return res;
}

/* Completes the requests of a part that does not run with res and frees its items. */
static void drop_part(group_part_t *part, braid_result_t res, const char *msg)
{
    for (int j = 0; j < part->n; j++) {
        if (part->items[j].req) braid_request_complete(part->comm, part->items[j].req, res, msg);
        item_free(&part->items[j]);
    }
    free(part->items);
}

/* Runs the parts (every communicator entered): on the caller's thread when there is one part
 * and its worker is idle, else each part as one task of its worker, waited for. */
static braid_result_t run_parts(group_part_t *parts, int nparts, braid_result_t reject_res,
                                const char *reject_msg)
{
    braid_result_t res = BRAID_SUCCESS;
    char msg[1024];
    msg[0] = '\0';
    if (nparts == 1 && !braid_worker_pending(parts[0].comm)) {
        res = run_items(parts[0].comm, parts[0].items, parts[0].n, reject_res, reject_msg);
        free(parts[0].items);
        return res;
    }
    struct braid_request **reqs = calloc((size_t)(nparts ? nparts : 1), sizeof(*reqs));
    if (!reqs) res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for a group");
    for (int i = 0; i < nparts; i++) {
        struct braid_request *req = NULL;
        braid_task_t *t = NULL;
        if (res >= 0) {
            req = calloc(1, sizeof(*req));
            t = calloc(1, sizeof(*t));
        }
        if (res >= 0 && (!req || !t))
            res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for a group");
        if (res >= 0) {
            t->kind = BRAID_TASK_GROUP;
            t->items = parts[i].items;
            t->nitems = parts[i].n;
            t->reject_res = reject_res;
            t->reject_msg = reject_msg;
            req->comm = parts[i].comm;
            req->task = t;
            res = braid_worker_submit(parts[i].comm, req);
        }
        if (res < 0) {
            free(req);
            free(t);
            snprintf(msg, sizeof(msg), "%s", braid_last_error());
            drop_part(&parts[i], res, msg);
            continue;
        }
        reqs[i] = req;
    }
    braid_result_t first = res;
    char first_msg[1024];
    snprintf(first_msg, sizeof(first_msg), "%s", res < 0 ? msg : "");
    for (int i = 0; reqs && i < nparts; i++) {
        if (!reqs[i]) continue;
        braid_result_t r = braid_wait(reqs[i]);
        if (r < 0 && first >= 0) {
            first = r;
            snprintf(first_msg, sizeof(first_msg), "%s", braid_last_error());
        }
    }
    free(reqs);
    if (first < 0) return braid_set_error(first, "%s", first_msg);
    return BRAID_SUCCESS;
}

/* The outermost group end enters every communicator of the group (as every entry that runs
 * communication: a destroy from another thread aborts the group's work and waits for it, one
 * thread at a time per communicator); one that is not live (destroyed inside the group) or
 * busy fails the whole group before anything runs. */
braid_result_t braid_group_end(void)
{
    braid_clear_error();
    if (group.depth <= 0)
        return braid_set_error(BRAID_ERR_INVALID_USAGE,
                               "braid_group_end without a matching braid_group_start");
    if (--group.depth > 0) return BRAID_SUCCESS;
    braid_result_t res = group.err, rejected = group.err;
    char msg[1024];
    msg[0] = '\0';
    if (res < 0) snprintf(msg, sizeof(msg), "%s", group.errmsg);
    int nparts = group.nparts;
    group_part_t *parts = group.parts;
    group.parts = NULL;
    group.nparts = group.cap = 0;
    struct braid_comm **comms = calloc((size_t)(nparts ? nparts : 1), sizeof(*comms));
    if (!comms && res >= 0) {
        res = braid_set_error(BRAID_ERR_NOMEM, "out of memory for a group");
        snprintf(msg, sizeof(msg), "%s", braid_last_error());
    }
    int entered = 0;
    for (; comms && entered < nparts; entered++) {
        braid_result_t r = braid_comm_enter_call(parts[entered].comm, "group_end");
        if (r >= 0) {
            comms[entered] = parts[entered].comm;
            continue;
        }
        if (res >= 0) {
            res = r;
            snprintf(msg, sizeof(msg), "group: %s", braid_last_error());
        }
        break;
    }
    /* Device collectives: what allocates (the device engine's collective setup, the staging
     * area) is done here, on the caller's thread, in call order, before any part goes to a
     * worker (which must not allocate while a stream-ordered call may hold a user stream). A
     * failure is this rank's refusal of the group: the peers are told, as for a bad argument. */
    for (int i = 0; res >= 0 && i < nparts; i++)
        for (int j = 0; res >= 0 && j < parts[i].n; j++) {
            braid_group_item_t *it = &parts[i].items[j];
            if (it->kind != BRAID_ITEM_COLL || !it->args.on_device) continue;
            braid_result_t r = braid_coll_prepare_dev(parts[i].comm, &it->args);
            if (r < 0) {
                res = rejected = r;
                snprintf(msg, sizeof(msg), "%s", braid_last_error());
                snprintf(group.errmsg, sizeof(group.errmsg), "%s", msg);
            }
        }
    if (res >= 0) {
        res = run_parts(parts, nparts, BRAID_SUCCESS, NULL);
        if (res < 0) snprintf(msg, sizeof(msg), "%s", braid_last_error());
        free(parts);
        parts = NULL;
        nparts = 0;
    } else if (rejected < 0 && res == rejected && comms && entered == nparts) {
        /* A call failed its checks: nothing is issued, but the peers are told. */
        char why[1024];
        snprintf(why, sizeof(why), "%s", group.errmsg);
        if (run_parts(parts, nparts, rejected, why) < 0) {
            char all[4096];
            snprintf(all, sizeof(all), "%s (and the peers' calls did not match: %s)", why,
                     braid_last_error());
            braid_str_fit(msg, sizeof(msg), all);
        }
        free(parts);
        parts = NULL;
        nparts = 0;
    }
    if (res < 0 && parts) { /* nothing ran: the requests complete with the error */
        for (int i = 0; i < nparts; i++)
            drop_part(&parts[i], res, msg);
        free(parts);
    }
    for (int i = 0; i < entered; i++)
        braid_comm_leave_call(comms[i]);
    free(comms);
    if (res < 0) return braid_set_error(res, "%s", msg);
    braid_clear_error();
    return BRAID_SUCCESS;
}

/* ---- worker tasks ----------------------------------------------------------------------- */
static void queued_done(struct braid_comm *comm, braid_p2p_op_t *op, braid_result_t res, void *arg)
{
    (void)arg;
    braid_worker_complete(comm, op->req, res, res < 0 ? braid_last_error() : "");
}

/* Takes the sends and receives queued at the head of the worker's queue. */
static int pull_p2p(struct braid_comm *comm, braid_p2p_batch_t *b, void *arg)
{
    (void)arg;
    int from = b->nops, added = 0;
    pthread_mutex_lock(&comm->q_lock);
    while (comm->q_head && comm->q_head->task && comm->q_head->task->kind == BRAID_TASK_P2P &&
           !comm->worker_stop) {
        struct braid_request *req = comm->q_head;
        braid_p2p_op_t op = req->task->op;
        op.req = req;
        if (braid_p2p_batch_add(b, &op) < 0) break;
        comm->q_head = req->next;
        if (!comm->q_head) comm->q_tail = NULL;
        added++;
    }
    pthread_mutex_unlock(&comm->q_lock);
    braid_p2p_assign_seq(comm, b, from);
    return added;
}

void braid_task_execute(struct braid_comm *comm, struct braid_request *req)
{
    braid_task_t *t = req->task;
    braid_result_t res = BRAID_SUCCESS;
    if (comm->worker_stop)
        res = braid_set_error(BRAID_ERR_ABORTED, "communicator destroyed before the operation ran");
    switch ((braid_task_kind_t)t->kind) {
    case BRAID_TASK_P2P: {
        braid_p2p_batch_t b = {0};
        braid_p2p_op_t op = t->op;
        op.req = req;
        if (res >= 0) res = check_comm_ok(comm);
        if (res >= 0) res = braid_p2p_batch_add(&b, &op);
        if (res < 0) {
            braid_worker_complete(comm, req, res, braid_last_error());
            braid_p2p_batch_free(&b);
            return;
        }
        braid_p2p_assign_seq(comm, &b, 0);
        braid_p2p_run(comm, &b, pull_p2p, queued_done, NULL); /* fails comm on error */
        braid_p2p_batch_free(&b);
        return;
    }
    case BRAID_TASK_PCOLL:
        if (res >= 0) res = braid_pcoll_execute(comm, &t->pc, 0);
        braid_pcoll_free(&t->pc);
        break;
    case BRAID_TASK_GROUP:
        if (res >= 0) {
            res = run_items(comm, t->items, t->nitems, t->reject_res, t->reject_msg);
        } else {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", braid_last_error());
            for (int i = 0; i < t->nitems; i++) {
                if (t->items[i].req) braid_request_complete(comm, t->items[i].req, res, msg);
                item_free(&t->items[i]);
            }
        }
        free(t->items);
        t->items = NULL;
        t->nitems = 0;
        break;
    }
    braid_worker_complete(comm, req, res, res < 0 ? braid_last_error() : "");
}

void braid_task_free(struct braid_task *t)
{
    if (!t) return;
    free(t->items);
    free(t);
}

/* ---- braid_send / braid_recv ------------------------------------------------------------ */
static braid_result_t p2p_check(struct braid_comm *comm, const char *name, const void *buf,
                                const char *bufname, size_t count, braid_datatype_t dtype, int peer)
{
    if ((unsigned)dtype >= BRAID_NUM_DTYPES)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: dtype=%d is not a braid_datatype_t",
                               name, (int)dtype);
    if (peer < 0 || peer >= comm->nranks)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: peer=%d is outside [0, nranks=%d)", name,
                               peer, comm->nranks);
    if (count > (SIZE_MAX / 2) / braid_dtype_size(dtype) || count > (UINT64_MAX >> 8))
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: count=%zu overflows the byte size", name,
                               count);
    if (count && !buf)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "%s: %s is NULL with count=%zu", name,
                               bufname, count);
    return BRAID_SUCCESS;
}

static const char *p2p_name(int kind, int iform)
{
    return kind == BRAID_P2P_SEND ? (iform ? "isend" : "send") : (iform ? "irecv" : "recv");
}

static braid_result_t p2p_call_in(int kind, const void *sbuf, void *rbuf, size_t count,
                                  braid_datatype_t dtype, int peer, struct braid_comm *comm,
                                  int iform, braid_request_t *req_p)
{
    const char *name = p2p_name(kind, iform);
    braid_result_t res = BRAID_SUCCESS;
    if (iform && !req_p) res = braid_set_error(BRAID_ERR_INVALID_ARG, "%s: req_p is NULL", name);
    const void *buf = kind == BRAID_P2P_SEND ? sbuf : rbuf;
    const char *bufname = kind == BRAID_P2P_SEND ? "sendbuf" : "recvbuf";
    int on_dev = 0;
    if (res >= 0) res = p2p_check(comm, name, buf, bufname, count, dtype, peer);
    if (res >= 0 && count) res = braid_dev_buf_check(comm, name, bufname, buf, &on_dev);
    if (res >= 0 && on_dev) res = braid_dev_ready(comm);
    braid_p2p_op_t op = {.kind = (uint8_t)kind,
                         .peer = peer,
                         .sbuf = sbuf,
                         .rbuf = rbuf,
                         .count = count,
                         .dtype = dtype,
                         .coll = BRAID_COLL_SEND,
                         .op = BRAID_SUM,
                         .root = -1,
                         .on_dev = on_dev};
    if (group.depth > 0 && res < 0) { /* kept so that group end can tell the peer */
        braid_group_note(res, name);
        braid_group_item_t it = {.kind = BRAID_ITEM_P2P, .op = op};
        return braid_group_add_rejected(comm, &it, res);
    }
    if (res < 0) return res;
    if (group.depth > 0) braid_group_note(res, name);
    if (group.depth > 0) {
        braid_group_item_t it = {.kind = BRAID_ITEM_P2P, .op = op};
        res = group_add(comm, &it, iform ? req_p : NULL);
        return res < 0 ? group_fail(res, name) : res;
    }
    if (!iform && !braid_worker_pending(comm)) {
        BRAID_CHECK(check_comm_ok(comm));
        if (kind == BRAID_P2P_RECV && peer == comm->rank && !braid_p2p_self_pending(comm))
            return braid_set_error(BRAID_ERR_INVALID_USAGE,
                                   "recv from self (rank %d) with no send to self posted before "
                                   "it: it would wait forever (post the send first, or both in "
                                   "a group)",
                                   peer);
        braid_p2p_op_t ops_st[1];
        braid_p2p_batch_t b = BRAID_P2P_BATCH_ON(ops_st, 1);
        BRAID_CHECK(braid_p2p_batch_add(&b, &op));
        braid_p2p_assign_seq(comm, &b, 0);
        res = braid_p2p_run(comm, &b, NULL, NULL, NULL); /* fails comm on error */
        braid_p2p_batch_free(&b);
        return res;
    }
    struct braid_request *req = calloc(1, sizeof(*req));
    braid_task_t *t = calloc(1, sizeof(*t));
    if (!req || !t) {
        free(req);
        free(t);
        return braid_set_error(BRAID_ERR_NOMEM, "%s: out of memory for a request", name);
    }
    t->kind = BRAID_TASK_P2P;
    t->op = op;
    req->comm = comm;
    req->task = t;
    res = braid_worker_submit(comm, req);
    if (res < 0) {
        free(req);
        free(t);
        return res;
    }
    if (iform) {
        *req_p = req;
        return BRAID_SUCCESS;
    }
    return braid_wait(req);
}

/* As every entry that runs communication: the communicator is entered (a destroy from another
 * thread aborts the call and waits for it to leave) by one thread at a time. */
static braid_result_t p2p_call(int kind, const void *sbuf, void *rbuf, size_t count,
                               braid_datatype_t dtype, int peer, struct braid_comm *comm, int iform,
                               braid_request_t *req_p)
{
    braid_clear_error();
    BRAID_CHECK(braid_comm_enter_call(comm, p2p_name(kind, iform)));
    braid_result_t res = p2p_call_in(kind, sbuf, rbuf, count, dtype, peer, comm, iform, req_p);
    braid_comm_leave_call(comm);
    return res;
}

braid_result_t braid_send(const void *sendbuf, size_t count, braid_datatype_t dtype, int peer,
                          braid_comm_t comm)
{
    return p2p_call(BRAID_P2P_SEND, sendbuf, NULL, count, dtype, peer, comm, 0, NULL);
}

braid_result_t braid_recv(void *recvbuf, size_t count, braid_datatype_t dtype, int peer,
                          braid_comm_t comm)
{
    return p2p_call(BRAID_P2P_RECV, NULL, recvbuf, count, dtype, peer, comm, 0, NULL);
}

braid_result_t braid_isend(const void *sendbuf, size_t count, braid_datatype_t dtype, int peer,
                           braid_comm_t comm, braid_request_t *req_p)
{
    return p2p_call(BRAID_P2P_SEND, sendbuf, NULL, count, dtype, peer, comm, 1, req_p);
}

braid_result_t braid_irecv(void *recvbuf, size_t count, braid_datatype_t dtype, int peer,
                           braid_comm_t comm, braid_request_t *req_p)
{
    return p2p_call(BRAID_P2P_RECV, NULL, recvbuf, count, dtype, peer, comm, 1, req_p);
}
