/* ncclGroupStart/End. Groups are per thread and nest; between the outermost start and its end,
 * calls are recorded, not run:
 * - communicator inits (one thread may init several ranks, as ncclCommInitAll does) start
 *   together at ncclGroupEnd, each on its own thread; blocking ones are waited for, and with a
 *   non-blocking one among them ncclGroupEnd returns ncclInProgress;
 * - operations run at ncclGroupEnd, per communicator in call order, inside one braid group
 *   (braid_group_start/end: sends and receives posted in any order progress together). When
 *   the group holds several communicators (one thread driving several ranks), each
 *   communicator's batch runs on its own thread so that they can progress together.
 * A call that fails its argument checks inside a group returns its error at once, and the
 * group's ncclGroupEnd then runs nothing and returns that error (as NCCL does). */
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
} group_t;

static _Thread_local group_t G;

int shim_group_depth(void)
{
    return G.depth;
}

static void group_reset(void)
{
    free(G.ops);
    free(G.inits);
    memset(&G, 0, sizeof(G));
}

/* A failure inside an open group: ncclGroupEnd reports it. */
static ncclResult_t group_error(ncclResult_t res)
{
    if (G.depth > 0 && G.err == ncclSuccess) {
        G.err = res;
        snprintf(G.errmsg, sizeof(G.errmsg), "%s", ncclGetLastError(NULL));
    }
    return res;
}

ncclResult_t shim_group_add_init(ncclComm_t comm)
{
    if (G.ninits == G.icap) {
        size_t cap = G.icap ? 2 * G.icap : 8;
        ncclComm_t *p = realloc(G.inits, cap * sizeof(*p));
        if (!p)
            return group_error(
                shim_fail(NULL, ncclSystemError, "ncclCommInitRank: out of memory in a group"));
        G.inits = p;
        G.icap = cap;
    }
    comm->init_deferred = 1;
    G.inits[G.ninits++] = comm;
    return ncclSuccess;
}

/* Runs one communicator's operations (ops[0..n) all on comm) in the calling thread. */
static ncclResult_t run_batch(ncclComm_t comm, shim_op_t *ops, size_t n)
{
    atomic_fetch_add(&comm->active, 1);
    ncclResult_t res = ncclSuccess;
    braid_result_t r = BRAID_SUCCESS;
    const char *failed = ops[0].name;
#if SHIM_HAVE_BRAID_GROUPS
    if (n > 1) {
        r = braid_group_start();
        for (size_t i = 0; i < n && r == BRAID_SUCCESS; i++) {
            r = shim_op_issue(&ops[i]);
            if (r != BRAID_SUCCESS) failed = ops[i].name;
        }
        braid_result_t e = braid_group_end();
        if (r == BRAID_SUCCESS && e != BRAID_SUCCESS) {
            r = e;
            failed = "ncclGroupEnd";
        }
    } else {
        r = shim_op_issue(&ops[0]);
    }
#else
    for (size_t i = 0; i < n && r == BRAID_SUCCESS; i++) {
        r = shim_op_issue(&ops[i]);
        if (r != BRAID_SUCCESS) failed = ops[i].name;
    }
#endif
    if (r != BRAID_SUCCESS) res = shim_braid_fail(comm, r, failed);
    atomic_fetch_sub(&comm->active, 1);
    return res;
}

ncclResult_t shim_submit(const shim_op_t *op)
{
    if (G.depth == 0) {
        shim_op_t one = *op;
        return run_batch(op->comm, &one, 1);
    }
    if (G.err != ncclSuccess) return ncclSuccess; /* the group fails at its end anyway */
    if (G.nops == G.cap) {
        size_t cap = G.cap ? 2 * G.cap : 16;
        shim_op_t *p = realloc(G.ops, cap * sizeof(*p));
        if (!p)
            return group_error(shim_fail(op->comm, ncclSystemError, "%s: out of memory", op->name));
        G.ops = p;
        G.cap = cap;
    }
    G.ops[G.nops++] = *op;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    shim_clear();
    G.depth++;
    return ncclSuccess;
}

typedef struct {
    ncclComm_t comm;
    shim_op_t *ops;
    size_t n;
    ncclResult_t res;
    pthread_t thread;
    int started;
} batch_t;

static void *batch_main(void *arg)
{
    batch_t *b = arg;
    b->res = run_batch(b->comm, b->ops, b->n);
    return NULL;
}

/* Starts the group's inits; waits for the blocking ones. */
static ncclResult_t run_inits(ncclComm_t *inits, size_t n)
{
    ncclResult_t res = ncclSuccess;
    int nonblocking = 0;
    for (size_t i = 0; i < n; i++)
        inits[i]->init_deferred = 0;
    if (n == 1 && inits[0]->blocking) {
        shim_init_run(inits[0]);
        return (ncclResult_t)atomic_load(&inits[0]->state);
    }
    for (size_t i = 0; i < n; i++) {
        ncclResult_t r = shim_init_start_thread(inits[i]);
        if (r != ncclSuccess && res == ncclSuccess) res = r;
        if (!inits[i]->blocking) nonblocking = 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!inits[i]->blocking) continue;
        shim_init_join(inits[i]);
        ncclResult_t r = (ncclResult_t)atomic_load(&inits[i]->state);
        if (r != ncclSuccess && res == ncclSuccess) {
            res = r;
            shim_fail(NULL, r, "%s", ncclGetLastError(inits[i]));
        }
    }
    return res == ncclSuccess && nonblocking ? ncclInProgress : res;
}

#if SHIM_HAVE_BRAID_GROUPS
/* Runs the group's operations as one braid group in the calling thread (braid runs several
 * communicators' parts concurrently, collectives in call order, point-to-point together). */
static ncclResult_t run_ops(shim_op_t *ops, size_t n)
{
    if (n == 0) return ncclSuccess;
    if (n == 1) return run_batch(ops[0].comm, ops, 1);
    for (size_t i = 0; i < n; i++)
        atomic_fetch_add(&ops[i].comm->active, 1);
    ncclResult_t res = ncclSuccess;
    braid_result_t r = braid_group_start();
    int open = r == BRAID_SUCCESS;
    if (!open) res = shim_braid_fail(NULL, r, "ncclGroupEnd (braid_group_start)");
    for (size_t i = 0; i < n && res == ncclSuccess; i++) {
        r = shim_op_issue(&ops[i]);
        if (r != BRAID_SUCCESS) res = shim_braid_fail(ops[i].comm, r, ops[i].name);
    }
    if (open) {
        r = braid_group_end();
        if (r != BRAID_SUCCESS && res == ncclSuccess)
            res = shim_braid_fail(NULL, r, "ncclGroupEnd");
    }
    if (res != ncclSuccess) {
        /* Every communicator of the group reports the failure. */
        char msg[SHIM_MSG_BYTES];
        snprintf(msg, sizeof(msg), "%s", ncclGetLastError(NULL));
        for (size_t i = 0; i < n; i++)
            shim_fail(ops[i].comm, res, "%s", msg);
    }
    for (size_t i = 0; i < n; i++)
        atomic_fetch_sub(&ops[i].comm->active, 1);
    return res;
}
#else
/* Runs the group's operations, one batch per communicator. */
static ncclResult_t run_ops(shim_op_t *ops, size_t n)
{
    if (n == 0) return ncclSuccess;
    /* Stable partition by communicator (call order kept within each). */
    batch_t *b = calloc(n, sizeof(*b));
    shim_op_t *sorted = malloc(n * sizeof(*sorted));
    if (!b || !sorted) {
        free(b);
        free(sorted);
        return shim_fail(NULL, ncclSystemError, "ncclGroupEnd: out of memory");
    }
    size_t nb = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < nb && b[j].comm != ops[i].comm)
            j++;
        if (j == nb) b[nb++].comm = ops[i].comm;
        b[j].n++;
    }
    for (size_t j = 0; j < nb; j++) {
        b[j].ops = sorted + k;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (ops[i].comm == b[j].comm) b[j].ops[m++] = ops[i];
        k += m;
    }
    ncclResult_t res = ncclSuccess;
    if (nb == 1) {
        res = run_batch(b[0].comm, b[0].ops, b[0].n);
    } else {
        for (size_t j = 0; j < nb; j++) {
            b[j].started = pthread_create(&b[j].thread, NULL, batch_main, &b[j]) == 0;
            if (!b[j].started) b[j].res = run_batch(b[j].comm, b[j].ops, b[j].n);
        }
        for (size_t j = 0; j < nb; j++) {
            if (b[j].started) pthread_join(b[j].thread, NULL);
            if (b[j].res != ncclSuccess && res == ncclSuccess) {
                res = b[j].res;
                shim_fail(NULL, res, "%s", ncclGetLastError(b[j].comm));
            }
        }
    }
    free(b);
    free(sorted);
    return res;
}

#endif

ncclResult_t ncclGroupEnd(void)
{
    shim_clear();
    if (G.depth == 0)
        return shim_fail(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open");
    if (--G.depth > 0) return ncclSuccess;
    ncclResult_t res;
    if (G.err != ncclSuccess) {
        /* Nothing of a failed group runs; its deferred inits fail. */
        for (size_t i = 0; i < G.ninits; i++) {
            G.inits[i]->init_deferred = 0;
            atomic_store(&G.inits[i]->state, G.err);
        }
        res = shim_fail(NULL, G.err, "ncclGroupEnd: a call of the group failed: %s", G.errmsg);
    } else if (G.ninits && G.nops) {
        res = shim_fail(NULL, ncclInvalidUsage,
                        "ncclGroupEnd: a group holds communicator inits and other operations");
    } else if (G.ninits) {
        res = run_inits(G.inits, G.ninits);
    } else {
        res = run_ops(G.ops, G.nops);
    }
    group_reset();
    return res;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    shim_clear();
    if (G.depth == 0)
        return shim_fail(NULL, ncclInvalidUsage, "ncclGroupSimulateEnd: no ncclGroupStart is open");
    if (--G.depth == 0) {
        for (size_t i = 0; i < G.ninits; i++) {
            G.inits[i]->init_deferred = 0;
            atomic_store(&G.inits[i]->state, ncclInvalidUsage);
        }
        group_reset();
    }
    if (simInfo) simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
    return shim_fail(NULL, ncclInvalidUsage,
                     "ncclGroupSimulateEnd: braid has no simulation; the group was dropped");
}

/* Exposed for coll.c: records a call's argument failure inside an open group. */
ncclResult_t shim_group_fail(ncclResult_t res)
{
    return group_error(res);
}

SHIM_PNAME(ncclGroupStart);
SHIM_PNAME(ncclGroupEnd);
SHIM_PNAME(ncclGroupSimulateEnd);
