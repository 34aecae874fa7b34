/* Unique ids, the communicator lifecycle (blocking, non-blocking and grouped inits, finalize,
 * destroy, abort; splits are split.c's) and the queries. */
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NCCL 2.26's ABI: these layouts are what programs compiled against NCCL's header pass in. */
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
_Static_assert(sizeof(ncclConfig_t) == 48 && offsetof(ncclConfig_t, blocking) == 16 &&
                   offsetof(ncclConfig_t, netName) == 32 &&
                   offsetof(ncclConfig_t, trafficClass) == 44,
               "ncclConfig_t has NCCL 2.26's layout");
_Static_assert(sizeof(ncclRedOp_t) == 4 && sizeof(ncclDataType_t) == 4, "enums are ints");

ncclResult_t ncclGetVersion(int *version)
{
    shim_clear();
    if (!version) return shim_fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    shim_clear();
    shim_env_init();
    if (!uniqueId) return shim_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    braid_unique_id_t id;
    const char *fixed = getenv("NCCL_COMM_ID");
    braid_result_t r;
    if (fixed && *fixed) {
        r = braid_unique_id_from_root(fixed, &id);
        if (r != BRAID_SUCCESS) return shim_braid_fail(NULL, r, "ncclGetUniqueId (NCCL_COMM_ID)");
    } else {
        r = braid_get_unique_id(&id);
        if (r != BRAID_SUCCESS) return shim_braid_fail(NULL, r, "ncclGetUniqueId");
    }
    _Static_assert(sizeof(id) == sizeof(*uniqueId), "unique id sizes differ");
    memcpy(uniqueId->internal, id.internal, sizeof(id));
    return ncclSuccess;
}

/* The CUDA device current in the calling thread, when the program has a CUDA runtime loaded
 * (braid's libnccl does not load one); 0 otherwise. */
static int current_cuda_device(void)
{
    typedef int (*get_device_fn)(int *);
    get_device_fn fn = (get_device_fn)dlsym(RTLD_DEFAULT, "cudaGetDevice");
    int dev = 0;
    if (fn && fn(&dev) != 0) dev = 0;
    return dev;
}

/* The live communicators: a call enters one only if it is listed (and not closing), under
 * this lock, so that a close on another thread either sees the call inside (and waits for it)
 * or the call sees the close (and is refused) — never a call on freed memory. A handle of a
 * freed communicator is refused too (unless its memory went to a new one). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t live_head;

static int live_has(ncclComm_t c)
{
    ncclComm_t p = live_head;
    while (p && p != c)
        p = p->next_live;
    return p != NULL;
}

ncclResult_t shim_enter(ncclComm_t comm, const char *call)
{
    if (!comm) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", call);
    pthread_mutex_lock(&live_lock);
    int live = live_has(comm), closing = live && comm->closing;
    if (live && !closing) atomic_fetch_add(&comm->active, 1);
    pthread_mutex_unlock(&live_lock);
    if (!live)
        return shim_fail(NULL, ncclInvalidArgument,
                         "%s: comm %p is not a communicator (destroyed, or never created)", call,
                         (void *)comm);
    if (closing)
        return shim_fail(NULL, ncclInvalidArgument, "%s: comm %p is being destroyed or aborted",
                         call, (void *)comm);
    return ncclSuccess;
}

void shim_leave(ncclComm_t comm)
{
    atomic_fetch_sub(&comm->active, 1); /* the last touch: a close may free comm now */
}

int shim_try_enter(ncclComm_t comm)
{
    pthread_mutex_lock(&live_lock);
    int ok = comm && live_has(comm) && !comm->closing;
    if (ok) atomic_fetch_add(&comm->active, 1);
    pthread_mutex_unlock(&live_lock);
    return ok;
}

/* Keeps msg as comm's failmsg unless one is kept already (under comm->lock). */
static void keep_failmsg(ncclComm_t comm, const char *msg)
{
    if (!comm->failmsg[0]) snprintf(comm->failmsg, sizeof(comm->failmsg), "%s", msg);
}

void shim_comm_stick(ncclComm_t comm, ncclResult_t res, const char *msg)
{
    if (comm->blocking || res == ncclSuccess || res == ncclInProgress) return;
    pthread_mutex_lock(&comm->lock);
    if (atomic_load(&comm->stuck) == ncclSuccess) {
        atomic_store(&comm->stuck, res);
        keep_failmsg(comm, msg && *msg ? msg : "ncclGroupEnd: a group of its calls failed");
    }
    pthread_mutex_unlock(&comm->lock);
}

ncclComm_t shim_comm_new(int nranks, const ncclUniqueId *id, int rank, int blocking)
{
    static _Atomic unsigned serial;
    ncclComm_t c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->magic = SHIM_COMM_MAGIC;
    c->optag = 1 + atomic_fetch_add(&serial, 1) % SHIM_OPTAG_MAX;
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = blocking;
    c->cudadev = current_cuda_device();
    if (id) memcpy(&c->id, id, sizeof(c->id));
    atomic_store(&c->state, ncclInProgress);
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca; /* monotonic: shim_init_wait's bound ignores clock changes */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->init_done, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&live_lock);
    c->next_live = live_head;
    live_head = c;
    pthread_mutex_unlock(&live_lock);
    return c;
}

static void live_unlink(ncclComm_t c)
{
    pthread_mutex_lock(&live_lock);
    ncclComm_t *pp = &live_head;
    while (*pp && *pp != c)
        pp = &(*pp)->next_live;
    if (*pp) *pp = c->next_live;
    pthread_mutex_unlock(&live_lock);
}

/* Freed structs wait here before their memory goes back to malloc, so that a stale handle of a
 * destroyed communicator cannot match a new one at the same address (and be accepted) for the
 * next SHIM_QUARANTINE frees, as braid's handle registry does. Under live_lock. */
#define SHIM_QUARANTINE 64
static ncclComm_t quarantine[SHIM_QUARANTINE];
static size_t quarantine_next;

static void comm_free(ncclComm_t c)
{
    live_unlink(c);
    pthread_cond_destroy(&c->init_done);
    pthread_mutex_destroy(&c->lock);
    /* magic 0 (a stale handle is refused) and no pointer left: what a free missed is a leak
     * LeakSanitizer sees, not memory the quarantine keeps reachable */
    memset(c, 0, sizeof(*c));
    pthread_mutex_lock(&live_lock);
    ncclComm_t oldest = quarantine[quarantine_next];
    quarantine[quarantine_next] = c;
    quarantine_next = (quarantine_next + 1) % SHIM_QUARANTINE;
    pthread_mutex_unlock(&live_lock);
    free(oldest);
}

void shim_comm_free(ncclComm_t c)
{
    comm_free(c);
}

void shim_comm_retire(ncclComm_t c)
{
    pthread_mutex_lock(&c->lock);
    c->bc = NULL;
    int pinned = c->pins > 0;
    c->retired = pinned;
    pthread_mutex_unlock(&c->lock);
    if (pinned)
        live_unlink(c); /* its handle is refused from now on; the last release frees it */
    else
        comm_free(c);
}

/* Waits until no call is inside comm (they return promptly once braid aborted or destroyed
 * it); 0 if some call stays longer than any of braid's waits would. */
static int wait_idle(ncclComm_t comm)
{
    struct timespec ts = {0, 1000000};
    for (int i = 0; atomic_load(&comm->active) > 0; i++) {
        if (i == SHIM_WAIT_LIMIT_S * 1000) return 0;
        nanosleep(&ts, NULL);
    }
    return 1;
}

void shim_comm_free_idle(ncclComm_t c)
{
    if (wait_idle(c)) shim_comm_retire(c); /* else a call never left: comm stays allocated */
}

void shim_group_claim(ncclComm_t *inits, size_t n)
{
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < n; i++)
        if (!inits[i]->closing) atomic_store(&inits[i]->init_deferred, SHIM_DEFERRED_ENDING);
    pthread_mutex_unlock(&live_lock);
}

void shim_init_finish(ncclComm_t c, ncclResult_t res, const char *msg)
{
    pthread_mutex_lock(&c->lock);
    if (res != ncclSuccess) {
        char generic[64];
        snprintf(generic, sizeof(generic), "the init failed (%s)", ncclGetErrorString(res));
        keep_failmsg(c, msg && *msg ? msg : generic);
    }
    atomic_store(&c->state, res);
    pthread_cond_broadcast(&c->init_done);
    pthread_mutex_unlock(&c->lock);
}

void shim_init_run(ncclComm_t c)
{
    braid_comm_t bc = NULL;
    braid_result_t r = braid_comm_init_rank(&bc, c->nranks, *(braid_unique_id_t *)&c->id, c->rank);
    if (r != BRAID_SUCCESS) {
        char call[64];
        snprintf(call, sizeof(call), "ncclCommInitRank (rank %d of %d)", c->rank, c->nranks);
        /* An aborted init's failure is nobody's to read: it leaves the last error alone. */
        if (atomic_load(&c->closing)) {
            shim_init_finish(c, shim_map(r), "the communicator was aborted during its init");
            return;
        }
        ncclResult_t res = shim_braid_fail(c, r, call);
        shim_init_finish(c, res, shim_thread_msg());
        return;
    }
    c->bc = bc;
    if (c->rank == 0 && shim_debug_level() >= 1)
        fprintf(stderr, "NCCL version %d.%d.%d+braid (braid %d)\n", NCCL_MAJOR, NCCL_MINOR,
                NCCL_PATCH, braid_version());
    shim_info("comm %p rank %d nranks %d cudaDev %d - Init COMPLETE", (void *)c, c->rank, c->nranks,
              c->cudadev);
    shim_init_finish(c, ncclSuccess, NULL);
}

int shim_init_run_owned(ncclComm_t c)
{
    shim_init_run(c);
    int running = SHIM_INIT_RUNNING;
    return !atomic_compare_exchange_strong(&c->init_owner, &running, SHIM_INIT_DONE);
}

void shim_init_orphan_end(ncclComm_t c)
{
    /* ncclCommAbort returned without waiting for the init (braid's cannot be cut short, NCCL's
     * abort ends it), so the init's runner finishes the abort and frees comm. */
    if (c->bc) {
        braid_comm_abort(c->bc);
        (void)braid_comm_destroy(c->bc);
    }
    shim_info("comm %p: orphaned init done (aborted while it ran): freeing the communicator",
              (void *)c);
    if (wait_idle(c)) shim_comm_retire(c); /* else a call never left: comm stays allocated */
}

static void *init_thread_main(void *arg)
{
    ncclComm_t c = arg;
    if (!shim_init_run_owned(c)) return NULL; /* the program's close joins this thread */
    pthread_detach(pthread_self());
    shim_init_orphan_end(c);
    return NULL;
}

ncclResult_t shim_init_start_thread(ncclComm_t c)
{
    atomic_store(&c->init_owner, SHIM_INIT_RUNNING);
    int e = pthread_create(&c->init_thread, NULL, init_thread_main, c);
    if (e) {
        atomic_store(&c->init_owner, SHIM_INIT_NONE);
        ncclResult_t res = shim_fail(
            c, ncclSystemError, "ncclCommInitRank: cannot start the init thread: %s", strerror(e));
        shim_init_finish(c, res, shim_thread_msg());
        return res;
    }
    c->init_thread_live = 1;
    return ncclSuccess;
}

int shim_init_wait(ncclComm_t c)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += SHIM_WAIT_LIMIT_S;
    int done = 1;
    pthread_mutex_lock(&c->lock);
    while (done && atomic_load(&c->state) == ncclInProgress && !atomic_load(&c->closing))
        done = pthread_cond_timedwait(&c->init_done, &c->lock, &until) != ETIMEDOUT;
    pthread_mutex_unlock(&c->lock);
    return done || atomic_load(&c->state) != ncclInProgress || atomic_load(&c->closing);
}

ncclResult_t shim_ready(ncclComm_t comm, const char *call)
{
    /* As NCCL's ncclCommEnsureReady: a communicator whose init has not returned ncclSuccess yet
     * (it waits for its group's end, or a non-blocking init still runs) is refused at once;
     * the program polls ncclCommGetAsyncError until the init is done. */
    if (comm->init_deferred)
        return shim_fail(comm, ncclInvalidArgument,
                         "%s: the communicator's init is in progress (it waits for its group's "
                         "ncclGroupEnd)",
                         call);
    int st = atomic_load(&comm->state);
    if (st == ncclInProgress)
        return shim_fail(comm, ncclInvalidArgument,
                         "%s: the communicator's init is in progress (attempt to use it before "
                         "ncclCommGetAsyncError returned ncclSuccess)",
                         call);
    /* The failure is read from failmsg, kept once, so that the message does not grow with each
     * call nor become another call's. */
    if (st != ncclSuccess || !comm->bc) {
        char why[SHIM_MSG_BYTES];
        shim_comm_msg(comm, why);
        return shim_fail(comm, st == ncclSuccess ? ncclInternalError : (ncclResult_t)st,
                         "%s: the communicator's init failed: %.600s", call, why);
    }
    int stuck = atomic_load(&comm->stuck);
    if (stuck != ncclSuccess) {
        char why[SHIM_MSG_BYTES];
        shim_comm_msg(comm, why);
        return shim_fail(comm, (ncclResult_t)stuck,
                         "%s: a group of the communicator's calls failed (its async error; "
                         "ncclCommAbort it): %.600s",
                         call, why);
    }
    return ncclSuccess;
}

ncclResult_t shim_check_config(const ncclConfig_t *config, int *blocking_p, const char *call)
{
    *blocking_p = 1;
    if (!config) return ncclSuccess;
    /* As NCCL's parseCommConfig: a config from an older nccl.h is shorter (2.14-2.16's: 24
     * bytes, up to blocking) and a later one longer; its first size bytes (at most ours) count,
     * over the defaults, and a field its version did not have yet keeps the default (blocking
     * before 2.14; cgaClusterSize, minCTAs and maxCTAs before 2.17). */
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.magic = 0;
    size_t size;
    memcpy(&size, config, sizeof(size));
    memcpy(&c, config, size < sizeof(c) ? size : sizeof(c));
    if (c.magic != 0xcafebeef)
        return shim_fail(NULL, ncclInvalidArgument,
                         "%s: config is not initialised with NCCL_CONFIG_INITIALIZER (magic 0x%x, "
                         "size %zu)",
                         call, c.magic, size);
    if (c.version < NCCL_VERSION(2, 14, 0)) c.blocking = NCCL_CONFIG_UNDEF_INT;
    if (c.version < NCCL_VERSION(2, 17, 0))
        c.cgaClusterSize = c.minCTAs = c.maxCTAs = NCCL_CONFIG_UNDEF_INT;
    /* NCCL's checks, all ncclInvalidArgument (the fields have no effect on braid). As NCCL's,
     * minCTAs > maxCTAs compares the values as they are, so a minCTAs set without maxCTAs
     * (NCCL_CONFIG_UNDEF_INT, INT_MIN) is refused too. */
    const int undef = NCCL_CONFIG_UNDEF_INT;
    if (c.blocking != undef && c.blocking != 0 && c.blocking != 1)
        return shim_fail(NULL, ncclInvalidArgument, "%s: config->blocking=%d (0 or 1)", call,
                         c.blocking);
    if (c.cgaClusterSize != undef && c.cgaClusterSize < 0)
        return shim_fail(NULL, ncclInvalidArgument, "%s: config->cgaClusterSize=%d is negative",
                         call, c.cgaClusterSize);
    if ((c.minCTAs != undef && c.minCTAs <= 0) || (c.maxCTAs != undef && c.maxCTAs <= 0) ||
        c.minCTAs > c.maxCTAs)
        return shim_fail(NULL, ncclInvalidArgument,
                         "%s: config->minCTAs=%d, maxCTAs=%d (positive, minCTAs <= maxCTAs; "
                         "NCCL_CONFIG_UNDEF_INT is %d)",
                         call, c.minCTAs, c.maxCTAs, undef);
    if (c.splitShare != undef && c.splitShare != 0 && c.splitShare != 1)
        return shim_fail(NULL, ncclInvalidArgument, "%s: config->splitShare=%d (0 or 1)", call,
                         c.splitShare);
    if (c.blocking == 0) *blocking_p = 0;
    return ncclSuccess;
}

int shim_env_blocking(int blocking)
{
    int env = shim_env_comm_blocking();
    return env >= 0 ? env : blocking;
}

/* As NCCL's ncclCommInitRankDev: *comm is the new communicator from the call on, whether its
 * init then succeeds or fails (a failed one stays the program's to destroy or abort: calls on it
 * return the init's error); an argument refused before that sets it to NULL, but for nranks
 * (refused before anything). Inside a group every refusal also fails the group's end (NCCL's
 * ncclGroupErrCheck). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    static const char *call = "ncclCommInitRankConfig";
    shim_clear();
    shim_env_init();
    if (nranks < 1)
        return shim_group_fail(
            shim_fail(NULL, ncclInvalidArgument, "%s: nranks=%d must be at least 1", call, nranks));
    ncclResult_t res = ncclSuccess;
    int blocking = 1;
    if (!comm)
        res = shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", call);
    else if (rank < 0 || rank >= nranks)
        res = shim_fail(NULL, ncclInvalidArgument, "%s: rank=%d is outside [0, nranks=%d)", call,
                        rank, nranks);
    else
        res = shim_check_config(config, &blocking, call);
    if (res == ncclSuccess) {
        blocking = shim_env_blocking(blocking);
        res = shim_group_mode(blocking, call);
    }
    if (res != ncclSuccess) {
        if (comm) *comm = NULL;
        return shim_group_fail(res);
    }
    ncclComm_t c = shim_comm_new(nranks, &commId, rank, blocking);
    if (!c) {
        *comm = NULL;
        return shim_group_fail(shim_fail(NULL, ncclSystemError, "%s: out of memory", call));
    }
    if (shim_group_depth() > 0) {
        res = shim_group_add_init(c);
        if (res != ncclSuccess) {
            comm_free(c);
            *comm = NULL;
            return res;
        }
        *comm = c;
        return ncclSuccess;
    }
    if (!blocking) {
        res = shim_init_start_thread(c);
        if (res != ncclSuccess) {
            comm_free(c);
            *comm = NULL;
            return res;
        }
        *comm = c;
        return ncclInProgress;
    }
    shim_init_run(c);
    *comm = c; /* failed too: the message stays the last error */
    return (ncclResult_t)atomic_load(&c->state);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config)
{
    shim_clear();
    /* As NCCL's ncclCommInitRankDev (nId in [1, nranks]); in a group the refusal fails its end
     * (ncclGroupErrCheck). */
    if (nId < 1 || nId > nranks || !commIds)
        return shim_group_fail(shim_fail(NULL, ncclInvalidArgument,
                                         "ncclCommInitRankScalable: nId=%d, commIds=%p (at least "
                                         "one id, at most nranks=%d)",
                                         nId, (void *)commIds, nranks));
    /* Every rank holds every id: the first one is enough for braid's bootstrap. */
    return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    static const char *call = "ncclCommInitAll";
    shim_clear();
    if (!comm) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", call);
    if (ndev < 1)
        return shim_fail(NULL, ncclInvalidArgument, "%s: ndev=%d must be positive", call, ndev);
    /* As NCCL where braid sees CUDA devices: devlist holds distinct devices (ncclInvalidArgument
     * for one out of range, ncclInvalidUsage for a repeated one), and without devlist comm i
     * gets device i. Where braid sees none (or fewer than ndev without devlist, where NCCL's
     * cudaSetDevice would fail), the ranks are host ranks: comm i keeps the current device, or
     * devlist[i] unchecked. */
    int total = braid_cuda_device_count();
    for (int i = 0; devlist && total > 0 && i < ndev; i++) {
        if (devlist[i] < 0 || devlist[i] >= total)
            return shim_fail(NULL, ncclInvalidArgument, "%s: devlist[%d]=%d is not a device (%d)",
                             call, i, devlist[i], total);
        for (int j = 0; j < i; j++)
            if (devlist[j] == devlist[i])
                return shim_fail(NULL, ncclInvalidUsage, "%s: devlist[%d] and [%d] are device %d",
                                 call, j, i, devlist[i]);
    }
    ncclUniqueId id;
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) return res;
    ncclResult_t g = ncclGroupStart();
    if (g != ncclSuccess) return g;
    for (int i = 0; i < ndev && res == ncclSuccess; i++) {
        res = ncclCommInitRank(comm + i, ndev, id, i);
        if (res != ncclSuccess) break;
        if (devlist)
            comm[i]->cudadev = devlist[i];
        else if (ndev <= total)
            comm[i]->cudadev = i;
    }
    g = ncclGroupEnd();
    return res != ncclSuccess ? res : g;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    shim_clear();
    if (!comm) return ncclSuccess; /* as NCCL */
    ncclResult_t res = shim_enter(comm, "ncclCommFinalize");
    if (res != ncclSuccess) return res;
    /* Host calls have completed when they returned: nothing is outstanding. */
    res = shim_ready(comm, "ncclCommFinalize");
    shim_leave(comm);
    return res;
}

static ncclResult_t comm_close(ncclComm_t comm, int abort, const char *call)
{
    shim_clear();
    if (!comm) return ncclSuccess; /* NCCL accepts NULL */
    pthread_mutex_lock(&live_lock);
    int live = live_has(comm), closing = live && comm->closing;
    int deferred = live && !closing ? atomic_load(&comm->init_deferred) : 0;
    /* An abort while ncclGroupEnd starts the init (SHIM_DEFERRED_ENDING) waits until the end
     * lets the communicator go (its init then runs or ran), as NCCL's waits for the group job. */
    for (int i = 0; abort && deferred == SHIM_DEFERRED_ENDING && i < SHIM_WAIT_LIMIT_S * 1000;
         i++) {
        pthread_mutex_unlock(&live_lock);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        pthread_mutex_lock(&live_lock);
        live = live_has(comm);
        closing = live && comm->closing;
        deferred = live && !closing ? atomic_load(&comm->init_deferred) : 0;
    }
    /* As NCCL's ncclCommAbort of an init recorded in an open group (ncclSuccess; the group's end
     * frees it): the end runs no init for it (a split is refused to braid, so the peers' splits
     * fail rather than wait), fails, and frees comm. */
    int cancel = abort && deferred == SHIM_DEFERRED_OPEN;
    /* As NCCL's ncclCommDestroy (ncclCommEnsureReady): not while the init runs (it would wait
     * for it, up to braid's timeout); the communicator stays as it was, an abort ends it. */
    int running = live && !closing && !deferred && !abort &&
                  atomic_load(&comm->init_owner) == SHIM_INIT_RUNNING &&
                  atomic_load(&comm->state) == ncclInProgress;
    if (live && !closing && (!deferred || cancel) && !running)
        atomic_store(&comm->closing, 1); /* calls are refused */
    pthread_mutex_unlock(&live_lock);
    if (!live || closing)
        return shim_fail(NULL, ncclInvalidArgument, "%s: comm %p is not a communicator%s", call,
                         (void *)comm, closing ? " (another thread closes it)" : "");
    if (cancel) return ncclSuccess;
    if (deferred) /* NCCL's ncclCommEnsureReady: its initState is ncclInProgress */
        return shim_fail(comm, ncclInvalidArgument,
                         "%s: the communicator's init is in progress (it waits for ncclGroupEnd)",
                         call);
    if (running)
        return shim_fail(comm, ncclInvalidArgument,
                         "%s: the communicator's init is in progress (wait for "
                         "ncclCommGetAsyncError to return ncclSuccess, or ncclCommAbort it)",
                         call);
    /* An ncclGroupEnd waiting for the init (on another thread) stops waiting now. */
    pthread_mutex_lock(&comm->lock);
    pthread_cond_broadcast(&comm->init_done);
    pthread_mutex_unlock(&comm->lock);
    int owner = SHIM_INIT_RUNNING;
    if (abort && atomic_compare_exchange_strong(&comm->init_owner, &owner, SHIM_INIT_ORPHANED))
        return ncclSuccess; /* the init's thread frees comm when braid's init returns */
    if (comm->init_thread_live) pthread_join(comm->init_thread, NULL);
    comm->init_thread_live = 0;
    ncclResult_t res = ncclSuccess;
    if (comm->bc) {
        /* Calls of other threads inside braid return promptly once aborted; braid's destroy
         * aborts the ones still inside it and waits for them. */
        if (abort) braid_comm_abort(comm->bc);
        braid_result_t r = braid_comm_destroy(comm->bc);
        /* NCCL's abort reports nothing: it frees what it can. */
        if (r != BRAID_SUCCESS && !abort) res = shim_braid_fail(NULL, r, call);
    }
    /* A call that entered comm before the close may still be in the shim (about to return,
     * or between its checks and braid): comm is freed once it left. */
    if (!wait_idle(comm)) {
        shim_fail(NULL, ncclInternalError,
                  "%s: a call on comm %p did not return; its memory is left allocated", call,
                  (void *)comm);
        return res;
    }
    shim_comm_retire(comm);
    return res;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm_close(comm, 0, "ncclCommDestroy");
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm_close(comm, 1, "ncclCommAbort");
}

static ncclResult_t async_error(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!asyncError)
        return shim_fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    /* An init recorded in an open group: ncclSuccess until its ncclGroupEnd, as NCCL's (its
     * asyncResult is set to ncclInProgress there, by ncclGroupEndInternal, for a non-blocking
     * group only). */
    if (atomic_load(&comm->init_deferred) == SHIM_DEFERRED_OPEN) {
        *asyncError = ncclSuccess;
        return ncclSuccess;
    }
    int st = atomic_load(&comm->state);
    if (st == ncclInProgress) {
        *asyncError = ncclInProgress;
        return ncclSuccess;
    }
    int stuck = atomic_load(&comm->stuck);
    if (st != ncclSuccess || !comm->bc || stuck != ncclSuccess) {
        /* The init's failure (recorded by its thread) or a failed group's: ncclGetLastError
         * tells it again. */
        char why[SHIM_MSG_BYTES];
        shim_comm_msg(comm, why);
        if (why[0]) shim_note(comm, why);
        *asyncError = st != ncclSuccess      ? (ncclResult_t)st
                      : stuck != ncclSuccess ? (ncclResult_t)stuck
                                             : ncclInternalError;
        return ncclSuccess;
    }
    braid_result_t err = BRAID_SUCCESS;
    const char *msg = NULL;
    braid_result_t r = braid_comm_get_error(comm->bc, &err, &msg);
    if (r != BRAID_SUCCESS) return shim_braid_fail(comm, r, "ncclCommGetAsyncError");
    if (err != BRAID_SUCCESS && msg && *msg) shim_note(comm, msg);
    *asyncError = shim_map(err);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclCommGetAsyncError");
    if (res != ncclSuccess) return res;
    res = async_error(comm, asyncError);
    shim_leave(comm);
    return res;
}

/* The queries: *out gets comm's nranks, cudadev or rank (which). */
static ncclResult_t query(const ncclComm_t comm, int *out, const char *call, const char *what,
                          const int *which)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, call);
    if (res != ncclSuccess) return res;
    if (!out) res = shim_fail(comm, ncclInvalidArgument, "%s: %s is NULL", call, what);
    /* As NCCL's ncclCommEnsureReady: not while an init waits for its group's end or runs
     * (NCCL's initState is ncclInProgress for both; the values may not be known yet:
     * ncclCommGetAsyncError tells when it is done), and a failed init's error after it. */
    else if (comm->init_deferred)
        res = shim_fail(comm, ncclInvalidArgument,
                        "%s: the communicator's init is in progress (it waits for ncclGroupEnd)",
                        call);
    else if (atomic_load(&comm->state) == ncclInProgress)
        res = shim_fail(comm, ncclInvalidArgument,
                        "%s: the communicator's init is in progress (wait for "
                        "ncclCommGetAsyncError to return ncclSuccess)",
                        call);
    /* A split's rank and size are known once it ran (at its ncclGroupEnd), and only if it
     * succeeded; a non-blocking communicator whose group failed is refused with the group's
     * error (NCCL's ncclCommEnsureReady returns its async error). */
    else if (comm->split_parent || atomic_load(&comm->state) != ncclSuccess ||
             atomic_load(&comm->stuck) != ncclSuccess)
        res = shim_ready(comm, call);
    if (res == ncclSuccess) *out = *which;
    shim_leave(comm);
    return res;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return query(comm, count, "ncclCommCount", "count", comm ? &comm->nranks : NULL);
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return query(comm, device, "ncclCommCuDevice", "device", comm ? &comm->cudadev : NULL);
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return query(comm, rank, "ncclCommUserRank", "rank", comm ? &comm->rank : NULL);
}

SHIM_PNAME(ncclGetVersion);
SHIM_PNAME(ncclGetUniqueId);
SHIM_PNAME(ncclCommInitRankConfig);
SHIM_PNAME(ncclCommInitRank);
SHIM_PNAME(ncclCommInitRankScalable);
SHIM_PNAME(ncclCommInitAll);
SHIM_PNAME(ncclCommFinalize);
SHIM_PNAME(ncclCommDestroy);
SHIM_PNAME(ncclCommAbort);
SHIM_PNAME(ncclCommGetAsyncError);
SHIM_PNAME(ncclCommCount);
SHIM_PNAME(ncclCommCuDevice);
SHIM_PNAME(ncclCommUserRank);
