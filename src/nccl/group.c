/* ncclGroupStart/End. Groups are per thread and nest; between the outermost start and its end,
 * calls are recorded, not run. At the end, as NCCL's groupLaunch:
 * - communicator inits and splits (one thread may init or split several ranks, as
 *   ncclCommInitAll does) run together, each plain init on its own thread while the splits
 *   run (split.c); a split's handle is written once it ran; blocking inits are waited for, and
 *   with a non-blocking one among them ncclGroupEnd returns ncclInProgress;
 * - then, if every init and split succeeded, the operations (on communicators that were ready
 *   when recorded) run inside one braid group (braid_group_start/end): each communicator's
 *   collectives in call order, its sends and receives together (posted in any order), several
 *   communicators (one thread driving several ranks) concurrently.
 * A call that fails its checks inside a group returns its error at once, and the group's
 * ncclGroupEnd then runs nothing and returns that error (as NCCL does). Whenever the outermost
 * end drops the recorded operations (a call of the group failed, an init or split of it failed
 * or was aborted, a communicator was closed since, a simulation), braid still gets them on
 * every communicator still live, as a group it rejects (a refused call's value braid refuses
 * too, else braid_group_reject with the cause: tell_dropped), so that they take their numbers
 * and the peers' calls fail naming the refusal instead of waiting for this rank or pairing with
 * its next calls. A failed group leaves its error as the async error of its non-blocking
 * communicators (NCCL's groupCleanup), which then refuse further calls. */
#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int depth;
    shim_op_t *ops;
    size_t nops, cap;
    ncclComm_t *inits;
    size_t ninits, icap;
    ncclResult_t err; /* first failure recorded inside the group */
    char errmsg[SHIM_MSG_BYTES];
    int mode;      /* NCCL's ncclGroupBlocking: 0 not set yet, 1 blocking, 2 non-blocking */
    int simulated; /* ended by ncclGroupSimulateEnd: the operations are not run */
} group_t;

static _Thread_local group_t G;

int shim_group_depth(void)
{
    return G.depth;
}

/* Ends the outermost group: its calls were issued (or dropped), so the PreMulSum ops they held
 * may go. */
static void group_reset(void)
{
    for (size_t i = 0; i < G.nops; i++)
        shim_redop_release(&G.ops[i]);
    free(G.ops);
    free(G.inits);
    memset(&G, 0, sizeof(G));
}

/* A failure inside an open group: ncclGroupEnd reports it. */
static ncclResult_t group_error(ncclResult_t res)
{
    if (G.depth > 0 && G.err == ncclSuccess) {
        G.err = res;
        snprintf(G.errmsg, sizeof(G.errmsg), "%s", shim_thread_msg());
    }
    return res;
}

ncclResult_t shim_group_mode(int blocking, const char *call)
{
    if (G.depth == 0) return ncclSuccess;
    int mode = blocking ? 1 : 2;
    if (G.mode == 0) G.mode = mode;
    if (G.mode == mode) return ncclSuccess;
    return group_error(shim_fail(NULL, ncclInvalidArgument,
                                 "%s: blocking and non-blocking communicators are not allowed in "
                                 "the same group (this one is %s, the group %s)",
                                 call, blocking ? "blocking" : "non-blocking",
                                 blocking ? "non-blocking" : "blocking"));
}

ncclResult_t shim_group_add_init(ncclComm_t comm)
{
    if (G.ninits == G.icap) {
        size_t cap = G.icap ? 2 * G.icap : 8;
        ncclComm_t *p = realloc(G.inits, cap * sizeof(*p));
        if (!p)
            return group_error(
                shim_fail(NULL, ncclSystemError, "%s: out of memory in a group",
                          comm->split_parent ? "ncclCommSplit" : "ncclCommInitRank"));
        G.inits = p;
        G.icap = cap;
    }
    comm->init_deferred = 1;
    G.inits[G.ninits++] = comm;
    return ncclSuccess;
}

/* The operations run blocking (complete on return, so the stream's later work sees their
 * results), after the work already queued on their streams (their inputs may come from it):
 * each distinct (communicator, stream) of ops is waited for first. */
static ncclResult_t wait_streams(const shim_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && (ops[j].comm != ops[i].comm || ops[j].stream != ops[i].stream))
            j++;
        if (j < i) continue;
        braid_result_t r = braid_comm_stream_wait(ops[i].comm->bc, (braid_stream_t)ops[i].stream);
        if (r != BRAID_SUCCESS) return shim_braid_fail(ops[i].comm, r, ops[i].name);
    }
    return ncclSuccess;
}

static void tell_dropped(const shim_op_t *ops, size_t n, const char *why, char *failed);

/* Runs one operation in the calling thread (its communicator entered). */
static ncclResult_t run_one(const shim_op_t *op)
{
    ncclResult_t w = wait_streams(op, 1);
    if (w != ncclSuccess) {
        tell_dropped(op, 1, shim_thread_msg(), NULL);
        return w;
    }
    braid_result_t r = shim_op_issue(op);
    return r == BRAID_SUCCESS ? ncclSuccess : shim_braid_fail(op->comm, r, op->name);
}

/* Enters the communicators of ops (once per op: leave_all undoes it); on a failure (one closed
 * since its call was recorded) none stays entered. */
static ncclResult_t enter_all(const shim_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ncclResult_t res = shim_enter(ops[i].comm, ops[i].name);
        if (res != ncclSuccess) {
            while (i-- > 0)
                shim_leave(ops[i].comm);
            return res;
        }
    }
    return ncclSuccess;
}

static void leave_all(const shim_op_t *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        shim_leave(ops[i].comm);
}

/* Appends op to the thread's open group (the calls after a failure too: braid numbers them
 * all when it is told of the drop). */
static ncclResult_t append(const shim_op_t *op)
{
    if (G.nops == G.cap) {
        size_t cap = G.cap ? 2 * G.cap : 16;
        shim_op_t *p = realloc(G.ops, cap * sizeof(*p));
        if (!p)
            return group_error(shim_fail(op->comm, ncclSystemError, "%s: out of memory", op->name));
        G.ops = p;
        G.cap = cap;
    }
    shim_redop_hold(op);
    G.ops[G.nops++] = *op;
    G.mode = op->comm->blocking ? 1 : 2; /* NCCL's ncclGroupCommJoin: set, never checked */
    return ncclSuccess;
}

ncclResult_t shim_submit(const shim_op_t *op)
{
    return G.depth == 0 ? run_one(op) : append(op);
}

/* buf (SHIM_MSG_BYTES) gets "; the communicator failed: <braid's message>" when braid failed
 * comm (entered; a rank whose refusal its peers did not share), else "". */
static void comm_failed(ncclComm_t comm, char *buf)
{
    braid_result_t err = BRAID_SUCCESS;
    const char *msg = NULL;
    buf[0] = '\0';
    if (comm->bc && braid_comm_get_error(comm->bc, &err, &msg) == BRAID_SUCCESS &&
        err != BRAID_SUCCESS)
        snprintf(buf, SHIM_MSG_BYTES, "; the communicator failed: %.220s",
                 msg && *msg ? msg : braid_strerror(err));
}

ncclResult_t shim_reject(const shim_op_t *op, ncclResult_t res, const char *msg)
{
    if (G.depth > 0) {
        shim_fail(op->comm, res, "%s", msg);
        group_error(res);
        (void)append(op); /* out of memory: its peers are not told */
        return res;
    }
    braid_result_t r = shim_op_issue(op); /* refused there too: its peers are told */
    if (r == BRAID_SUCCESS)               /* cannot be: op holds the value at fault */
        return shim_fail(op->comm, ncclInternalError, "%s (yet braid ran the call)", msg);
    /* braid fails the communicator when the peers did not refuse the same call (NCCL's
     * refusing rank keeps a usable one): the message says so. */
    char failed[SHIM_MSG_BYTES];
    comm_failed(op->comm, failed);
    return shim_fail(op->comm, res, "%.500s%s", msg, failed);
}

/* The operations ops[0..n) are dropped, not run: braid still gets those on communicators
 * still live (a closed one's peers fail as for any closed communicator), as one group it
 * rejects, so that they take their numbers and the peers' matching calls fail naming the
 * rejection and why, instead of pairing with this rank's next calls. A refused call among them
 * (shim_reject) rejects the group with braid's own message. failed (SHIM_MSG_BYTES, or NULL)
 * gets comm_failed's note for the first communicator braid then failed. */
static void tell_dropped(const shim_op_t *ops, size_t n, const char *why, char *failed)
{
    char reason[SHIM_MSG_BYTES];
    snprintf(reason, sizeof(reason), "%s", why && *why ? why : "its group was not run");
    if (failed) failed[0] = '\0';
    unsigned char *in = calloc(n ? n : 1, 1);
    if (!in) return; /* out of memory: the peers are not told */
    if (braid_group_start() == BRAID_SUCCESS) {
        for (size_t i = 0; i < n; i++)
            if ((in[i] = (unsigned char)shim_try_enter(ops[i].comm))) (void)shim_op_issue(&ops[i]);
        (void)braid_group_reject(BRAID_ERR_INVALID_USAGE, reason);
        (void)braid_group_end();
    }
    for (size_t i = 0; i < n; i++) {
        if (!in[i]) continue;
        if (failed && !failed[0]) comm_failed(ops[i].comm, failed);
        shim_leave(ops[i].comm);
    }
    free(in);
}

ncclResult_t ncclGroupStart(void)
{
    shim_clear();
    G.depth++;
    return ncclSuccess;
}

/* A single blocking init and nothing else to run beside it: inline, under the orphan protocol
 * too (an abort from another thread returns at once, as NCCL's, and this thread frees comm
 * after braid's init returned). */
static ncclResult_t run_init_inline(ncclComm_t c)
{
    /* Entered before a close from another thread may see it (init_deferred cleared). */
    atomic_fetch_add(&c->active, 1);
    atomic_store(&c->init_owner, SHIM_INIT_RUNNING);
    atomic_store(&c->init_deferred, 0);
    int orphaned = shim_init_run_owned(c);
    ncclResult_t res = (ncclResult_t)atomic_load(&c->state);
    if (orphaned)
        res = shim_fail(NULL, ncclInvalidArgument, "ncclGroupEnd: comm %p was aborted", (void *)c);
    shim_leave(c);
    if (orphaned) shim_init_orphan_end(c);
    return res;
}

/* Starts the plain inits, each on its own thread; returns the first that could not start. */
static ncclResult_t start_inits(ncclComm_t *inits, size_t n)
{
    ncclResult_t res = ncclSuccess;
    /* Entered (no close can have started: a deferred init refuses it) before a close from
     * another thread may see them (init_deferred cleared), so that a close waits for this. */
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add(&inits[i]->active, 1);
    for (size_t i = 0; i < n; i++) {
        ncclResult_t r = shim_init_start_thread(inits[i]);
        if (r != ncclSuccess && res == ncclSuccess) res = r;
        /* Only now may a close see it: an abort finds init_owner set (and orphans the init)
         * or init_thread_live (and joins it), never a thread about to start on freed memory. */
        atomic_store(&inits[i]->init_deferred, 0);
    }
    return res;
}

/* Waits for the started inits: the blocking ones, or all of them with all; then leaves them.
 * Returns the first failure. */
static ncclResult_t wait_inits(ncclComm_t *inits, size_t n, int all)
{
    ncclResult_t res = ncclSuccess;
    for (size_t i = 0; i < n; i++) {
        if (!inits[i]->blocking && !all) continue;
        int done = shim_init_wait(inits[i]);
        ncclResult_t r = (ncclResult_t)atomic_load(&inits[i]->state);
        if (r == ncclInProgress && res == ncclSuccess)
            res = done ? shim_fail(NULL, ncclInvalidArgument, "ncclGroupEnd: comm %p was aborted",
                                   (void *)inits[i])
                       : shim_fail(NULL, ncclInternalError,
                                   "ncclGroupEnd: the init of comm %p did not finish in %d s",
                                   (void *)inits[i], SHIM_WAIT_LIMIT_S);
        else if (r != ncclSuccess && res == ncclSuccess) {
            char msg[SHIM_MSG_BYTES];
            shim_comm_msg(inits[i], msg);
            res = shim_fail(NULL, r, "%s", msg);
        }
    }
    for (size_t i = 0; i < n; i++)
        shim_leave(inits[i]);
    return res;
}

/* Runs the group's operations as one braid group in the calling thread (braid runs several
 * communicators' parts concurrently, collectives in call order, point-to-point together). */
static ncclResult_t run_ops(shim_op_t *ops, size_t n)
{
    if (n == 0) return ncclSuccess;
    /* Entered before anything touches them: a close on another thread waits for the group. */
    ncclResult_t res = enter_all(ops, n);
    if (res != ncclSuccess) {
        tell_dropped(ops, n, shim_thread_msg(), NULL);
        return res;
    }
    if (n == 1) {
        res = run_one(&ops[0]);
        leave_all(ops, n);
        return res;
    }
    res = wait_streams(ops, n);
    if (res != ncclSuccess) {
        leave_all(ops, n);
        tell_dropped(ops, n, shim_thread_msg(), NULL);
        return res;
    }
    braid_result_t r = braid_group_start();
    int open = r == BRAID_SUCCESS;
    if (!open) res = shim_braid_fail(NULL, r, "ncclGroupEnd (braid_group_start)");
    /* All of them, after a refused one too: braid then tells the peers of every call. */
    for (size_t i = 0; open && i < n; i++) {
        r = shim_op_issue(&ops[i]);
        if (r != BRAID_SUCCESS && res == ncclSuccess)
            res = shim_braid_fail(ops[i].comm, r, ops[i].name);
    }
    if (open) {
        r = braid_group_end();
        if (r != BRAID_SUCCESS && res == ncclSuccess)
            res = shim_braid_fail(NULL, r, "ncclGroupEnd");
    }
    if (res != ncclSuccess) {
        /* Every communicator of the group reports the failure. */
        char msg[SHIM_MSG_BYTES];
        snprintf(msg, sizeof(msg), "%s", shim_thread_msg());
        for (size_t i = 0; i < n; i++)
            shim_fail(ops[i].comm, res, "%s", msg);
    }
    leave_all(ops, n);
    return res;
}

/* The group's inits and splits, not run (err, message msg) or already run (err ==
 * ncclSuccess: their state is set). Freed: the phantom splits (a NCCL_SPLIT_NOCOLOR rank's part,
 * never handed out), those aborted while deferred, and in a failed group the splits (never run:
 * their handles stay NULL, as NCCL's). Released to the program: the others, a split's handle
 * written first (NCCL's ncclCommInitRankFunc writes *newcomm when the split's job ends, after a
 * failure too), a plain init of a failed group given err. init_deferred is cleared after their
 * state is published: from then on a close on another thread may free them, so this is the last
 * touch. */
static void settle_inits(ncclComm_t *inits, size_t n, ncclResult_t err, const char *msg)
{
    for (size_t i = 0; i < n; i++) {
        ncclComm_t c = inits[i];
        if (c->split_phantom || atomic_load(&c->closing) || (err && c->split_parent)) {
            shim_comm_free_idle(c); /* a call (ncclCommGetAsyncError) may still be inside */
            continue;
        }
        if (err != ncclSuccess) shim_init_finish(c, err, msg);
        if (c->split_parent) *c->split_out = c;
        atomic_store(&c->init_deferred, 0);
    }
}

/* Moves the plain inits of inits[0..n) to its front, the splits after them, each in call
 * order; returns the number of plain inits. */
static size_t plain_first(ncclComm_t *inits, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (inits[i]->split_parent) continue;
        ncclComm_t c = inits[i];
        memmove(inits + k + 1, inits + k, (i - k) * sizeof(*inits));
        inits[k++] = c;
    }
    return k;
}

/* A group that no call failed, as NCCL's groupLaunch: its inits and splits (NCCL's async jobs)
 * run together, the plain inits on their threads while this thread runs the splits, so that a
 * split may meet peers that first finish the init (a peer blocking in ncclCommInitRank, then
 * ncclCommSplit, while this rank groups both; run one after the other, the two sides would wait
 * for each other). Then, only if every one of them succeeded and none was aborted (dropped), the
 * operations: on other communicators, ready when recorded. A group with operations waits for
 * its non-blocking inits too (its operations run blocking); one without returns ncclInProgress
 * for them at once. A non-blocking group (its first init, split or operation was on a
 * non-blocking communicator) that succeeded returns ncclInProgress, as NCCL's, though its splits
 * and operations are done when it returns. Operations not run (an init failed, dropped: one was
 * aborted, or a simulation) are told to braid as dropped. */
static ncclResult_t run_group(const char *dropped)
{
    size_t nplain = plain_first(G.inits, G.ninits), nsplit = G.ninits - nplain;
    int nonblocking = G.mode == 2; /* NCCL's ncclGroupBlocking: ncclInProgress for such a group */
    ncclResult_t res;
    if (nplain == 1 && nsplit == 0 && G.inits[0]->blocking) {
        res = run_init_inline(G.inits[0]);
    } else {
        res = start_inits(G.inits, nplain);
        ncclResult_t r = shim_splits_run(G.inits + nplain, nsplit, ncclSuccess);
        settle_inits(G.inits + nplain, nsplit, ncclSuccess, NULL);
        ncclResult_t w = wait_inits(G.inits, nplain, G.nops > 0);
        if (res == ncclSuccess) res = r;
        if (res == ncclSuccess) res = w;
    }
    if (G.nops > 0 && res == ncclSuccess && !dropped[0] && !G.simulated) {
        res = run_ops(G.ops, G.nops);
    } else if (G.nops > 0 && (res != ncclSuccess || dropped[0])) {
        char why[SHIM_MSG_BYTES];
        snprintf(why, sizeof(why), "%s", res != ncclSuccess ? shim_thread_msg() : dropped);
        tell_dropped(G.ops, G.nops, why, NULL);
    }
    /* A simulated group's operations are this rank's alone, as NCCL's (its groupLaunch with a
     * simInfo launches nothing and tells no peer): not given to braid, so a rank may simulate
     * a group its peers never make. */
    return res == ncclSuccess && nonblocking ? ncclInProgress : res;
}

/* A failed group (res, the thread's message): its non-blocking communicators still live keep
 * the error (shim_comm_stick), as NCCL's groupCleanup sets their async error. */
static void stick_all(const shim_op_t *ops, size_t n, ncclResult_t res)
{
    char msg[SHIM_MSG_BYTES];
    snprintf(msg, sizeof(msg), "%s", shim_thread_msg());
    for (size_t i = 0; i < n; i++) {
        if (!shim_try_enter(ops[i].comm)) continue;
        shim_comm_stick(ops[i].comm, res, msg);
        shim_leave(ops[i].comm);
    }
}

ncclResult_t ncclGroupEnd(void)
{
    shim_clear();
    if (G.depth == 0)
        return shim_fail(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open");
    if (--G.depth > 0) return ncclSuccess;
    shim_group_claim(G.inits, G.ninits);
    /* Plain inits aborted before the end: never run (braid's init cannot be cut short), freed;
     * the end fails without running the group's operations (their peers' inits wait, as NCCL's
     * do for an aborted rank, and so their groups run no operation either). */
    char dropped[SHIM_MSG_BYTES] = "";
    size_t kept = 0;
    for (size_t i = 0; i < G.ninits; i++) {
        ncclComm_t c = G.inits[i];
        if (c->split_parent || !atomic_load(&c->closing)) {
            G.inits[kept++] = c;
            continue;
        }
        if (!dropped[0])
            snprintf(dropped, sizeof(dropped), "ncclGroupEnd: comm %p was aborted before its init",
                     (void *)c);
        shim_comm_free_idle(c);
    }
    G.ninits = kept;
    ncclResult_t res;
    if (G.err != ncclSuccess) {
        /* Nothing of a failed group runs: its splits are refused (so the peers' fail too), its
         * operations told to braid as dropped, its inits fail. */
        (void)shim_splits_run(G.inits, G.ninits, G.err);
        char failed[SHIM_MSG_BYTES];
        tell_dropped(G.ops, G.nops, G.errmsg, failed);
        settle_inits(G.inits, G.ninits, G.err, G.errmsg);
        res = shim_fail(NULL, G.err, "ncclGroupEnd: a call of the group failed: %.500s%s", G.errmsg,
                        failed);
    } else {
        res = run_group(dropped);
    }
    if (dropped[0] && (res == ncclSuccess || res == ncclInProgress))
        res = shim_fail(NULL, ncclInvalidArgument, "%s", dropped);
    if (res != ncclSuccess && res != ncclInProgress) stick_all(G.ops, G.nops, res);
    group_reset();
    return res;
}

/* NCCL 2.26's ncclGroupSimulateEnd is ncclGroupEndInternal(simInfo): with simInfo NULL it is
 * ncclGroupEnd; an inner end only counts down; a failed group fails as at ncclGroupEnd; a simInfo
 * without NCCL_SIM_INFO_INITIALIZER's magic fails the group (ncclInvalidArgument); a group of
 * non-blocking communicators runs as at ncclGroupEnd (groupLaunchNonBlocking drops simInfo); a
 * blocking group runs its inits and splits (its async jobs) but launches none of its operations,
 * and only its collectives set estimatedTime (getAlgoInfo). braid has no cost model to estimate a
 * collective with, so a group holding one drops its operations (as NCCL) and returns
 * ncclInvalidUsage with estimatedTime unchanged rather than a made-up time; its inits still run.
 * Without collectives NCCL leaves estimatedTime as it was too, and so does this. The
 * operations stay this rank's (NCCL tells no peer either): a rank may simulate alone. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    if (!simInfo || G.depth != 1) return ncclGroupEnd();
    shim_clear();
    if (G.err != ncclSuccess) return ncclGroupEnd(); /* fails as there */
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    si.magic = 0; /* as NCCL: a simInfo too short to hold the magic has none */
    size_t size;
    memcpy(&size, simInfo, sizeof(size));
    memcpy(&si, simInfo, size < sizeof(si) ? size : sizeof(si));
    if (si.magic != 0x74685283u) {
        group_error(shim_fail(NULL, ncclInvalidArgument,
                              "ncclGroupSimulateEnd: simInfo is not initialised with "
                              "NCCL_SIM_INFO_INITIALIZER (magic 0x%x)",
                              si.magic));
        return ncclGroupEnd();
    }
    if (G.mode == 2) return ncclGroupEnd(); /* NCCL's ncclGroupBlocking: non-blocking */
    /* A communicator closed since its call was recorded: ncclGroupEnd reports it. */
    if (enter_all(G.ops, G.nops) != ncclSuccess) return ncclGroupEnd();
    leave_all(G.ops, G.nops);
    int colls = 0;
    for (size_t i = 0; i < G.nops; i++)
        colls |= G.ops[i].kind != SHIM_SEND && G.ops[i].kind != SHIM_RECV;
    G.simulated = 1;
    ncclResult_t res = ncclGroupEnd(); /* the inits and splits */
    if (res != ncclSuccess || !colls) return res;
    return shim_fail(NULL, ncclInvalidUsage,
                     "ncclGroupSimulateEnd: braid has no cost model to estimate the group's "
                     "collectives with: estimatedTime is left unchanged and the group's "
                     "operations were not run (its inits were)");
}

/* Exposed for coll.c: records a call's argument failure inside an open group. */
ncclResult_t shim_group_fail(ncclResult_t res)
{
    return group_error(res);
}

SHIM_PNAME(ncclGroupStart);
SHIM_PNAME(ncclGroupEnd);
SHIM_PNAME(ncclGroupSimulateEnd);
