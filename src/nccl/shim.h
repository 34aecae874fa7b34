/* braid's NCCL drop-in (libnccl.so.2), internal declarations. Written on braid's public API
 * (include/braid/braid.h) only.
 *
 * Files: init.c (ids, communicator lifecycle, queries), split.c (ncclCommSplit, and the splits
 * of a group), coll.c (collectives, point-to-point, PreMulSum, memory and registration), group.c
 * (ncclGroupStart/End: deferred inits and batched operations), errors.c (result mapping,
 * last-error messages, logging), env.c (nccl.conf, NCCL_* variables mapped onto BRAID_* ones).
 *
 * Threading: a communicator may be used by one thread at a time (as NCCL requires), except
 * ncclCommAbort and ncclCommGetAsyncError, which any thread may call at any time. Every call
 * that takes a communicator enters it first (shim_enter: found among the live ones and not
 * closing, its active count raised) and leaves it last; ncclCommDestroy/Abort mark it closing,
 * so later calls are refused, and free it only once no call is inside. */
#ifndef BRAID_NCCL_SHIM_H
#define BRAID_NCCL_SHIM_H

#include "braid/braid.h"
#include "nccl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define SHIM_COMM_MAGIC 0x6e63636cu /* "nccl" */
#define SHIM_MAX_REDOPS 256         /* created (PreMulSum) ops alive per communicator */
/* A created op's ncclRedOp_t is ncclNumOps + (optag << 8 | slot): optag is its communicator's
 * (1..SHIM_OPTAG_MAX, a serial of the communicators made), so that an op given to another
 * communicator is refused, as NCCL 2.26 mangles its op values with a hash of the comm
 * (ncclUserRedOpMangle). Every value stays within [ncclNumOps, ncclMaxRedOp]. */
#define SHIM_OPTAG_MAX ((ncclMaxRedOp - ncclNumOps - (SHIM_MAX_REDOPS - 1)) / SHIM_MAX_REDOPS)
#define SHIM_MSG_BYTES 768
/* The longest the shim waits for an init or for calls to leave a communicator: longer than any
 * of braid's own bounded waits (BRAID_TIMEOUT and the like), so it only ends a wait that would
 * otherwise hang on a defect. */
#define SHIM_WAIT_LIMIT_S 600
enum { SHIM_INIT_NONE, SHIM_INIT_RUNNING, SHIM_INIT_DONE, SHIM_INIT_ORPHANED };
/* init_deferred: recorded in an open group; its ncclGroupEnd has started (shim_group_claim). */
enum { SHIM_DEFERRED_OPEN = 1, SHIM_DEFERRED_ENDING = 2 };

struct ncclComm {
    unsigned magic;  /* SHIM_COMM_MAGIC while alive */
    braid_comm_t bc; /* NULL until the init succeeded */
    int rank, nranks, cudadev, blocking;
    /* ncclInProgress while the init has not finished, then its result. */
    _Atomic int state;
    /* The init: its arguments, and its thread for non-blocking or grouped inits. */
    ncclUniqueId id;
    /* Recorded in an open group, not started yet (SHIM_DEFERRED_*): a destroy is refused, so
     * ncclGroupEnd owns comm until it clears this (its last touch, after state and init_owner
     * are published). An abort before the end marks it closing: the end frees it unrun. */
    _Atomic int init_deferred;
    /* An ncclCommSplit recorded in an open group: the init splits split_parent at
     * ncclGroupEnd. split_phantom: this rank takes no part in the result (NCCL_SPLIT_NOCOLOR),
     * so the struct only carries its part of the split and ncclGroupEnd frees it. */
    ncclComm_t split_parent;
    int split_color, split_key, split_phantom;
    /* The program's newcomm, NULL from the call on: ncclGroupEnd writes the handle there once the
     * split ran (failed too), as NCCL's ncclCommInitRankFunc; never for a phantom. */
    ncclComm_t *split_out;
    int init_thread_live; /* init_thread runs or ran the init: the close joins it */
    pthread_t init_thread;
    /* Who frees comm after its init thread: SHIM_INIT_RUNNING while it runs, then (a
     * compare-and-swap) SHIM_INIT_DONE by the thread (the program's close joins it and frees),
     * or SHIM_INIT_ORPHANED by an ncclCommAbort that returned at once: the thread frees comm. */
    _Atomic int init_owner;
    pthread_cond_t init_done; /* broadcast (under lock) when state is set or a close starts */
    /* Calls inside the shim on this communicator (its close waits for them to leave). */
    _Atomic int active;
    _Atomic int closing;        /* ncclCommDestroy/Abort started (set under the live list's lock) */
    struct ncclComm *next_live; /* the live communicators' list (init.c) */
    pthread_mutex_t lock; /* errmsg, failmsg, redops, pins, retired, joining the init thread */
    /* Calls recorded in open groups that hold a PreMulSum op of this communicator: they touch
     * the struct when their group ends, so a close while pins > 0 leaves it allocated (unlisted,
     * retired) and the last release frees it. */
    int pins, retired;
    /* The last failure of a call on this communicator (shim_fail; for a debugger: what the
     * shim reports of a communicator is failmsg). */
    char errmsg[SHIM_MSG_BYTES];
    /* Why the communicator is unusable, written once (shim_init_finish, shim_comm_stick): its
     * init's failure, or, with stuck set, the failure of a group that held its calls. */
    char failmsg[SHIM_MSG_BYTES];
    /* A failed group's result, sticky on a non-blocking communicator (NCCL's groupCleanup sets
     * its async error): ncclCommGetAsyncError reports it, the calls are refused. */
    _Atomic int stuck;
    unsigned optag; /* its created ops' tag (SHIM_OPTAG_MAX) */
    /* used: 0 free, 1 alive, 2 being created, 3 destroyed by the program while calls recorded
     * in an open group still use it (NCCL lets an op be destroyed once the calls given it have
     * returned, and a recorded call has): braid's op is destroyed when holds (the recorded
     * calls not yet issued) drops to 0. */
    struct {
        int used, holds;
        braid_redop_t op;
        ncclDataType_t dtype;
    } redops[SHIM_MAX_REDOPS]; /* ncclRedOp_t value ncclNumOps + (optag << 8 | i) */
};

/* NCCL exports every function twice: ncclX and the profiling name pncclX. */
#define SHIM_PNAME(f) extern __typeof__(f) p##f __attribute__((alias(#f)))

/* ---- errors.c ------------------------------------------------------------------------------- */
/* Records a failure (the thread's message, the process's (ncclGetLastError), comm's when comm
 * is given, a WARN line when NCCL_DEBUG asks for it) and returns res. */
ncclResult_t shim_fail(ncclComm_t comm, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The NCCL code braid's result maps to. */
ncclResult_t shim_map(braid_result_t r);
/* Maps a failed braid call: the message is "<call>: <braid_last_error()>". */
ncclResult_t shim_braid_fail(ncclComm_t comm, braid_result_t r, const char *call);
/* Clears the calling thread's message (the process's stays, as NCCL's). */
void shim_clear(void);
/* The calling thread's last failure (empty after shim_clear). */
const char *shim_thread_msg(void);
/* Copies why comm is unusable (its failmsg: its init's failure, or a failed group's) into buf
 * (SHIM_MSG_BYTES). */
void shim_comm_msg(ncclComm_t comm, char *buf);
/* Records msg as comm's (when comm is given) and the process's last failure, without a WARN
 * line: for a failure found again (ncclCommGetAsyncError) rather than made by this call. */
void shim_note(ncclComm_t comm, const char *msg);
/* NCCL_DEBUG levels: 0 none, 1 version, 2 warn, 3 info, 4 trace. */
int shim_debug_level(void);
void shim_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- env.c ---------------------------------------------------------------------------------- */
/* Reads the nccl.conf files into the environment (without overwriting), once per process: called
 * before any NCCL_* variable is read, as NCCL's ncclGetEnv calls initEnv. */
void shim_env_conf(void);
/* Maps the NCCL_* variables onto unset BRAID_* ones, once per process (before the first id or
 * communicator); the nccl.conf files first. */
void shim_env_init(void);
/* NCCL_COMM_BLOCKING: 0 or 1 when set to one of them, else -1; read once, at the first call (the
 * first init's or split's config, as NCCL's ncclParamCommBlocking). */
int shim_env_comm_blocking(void);

/* ---- init.c --------------------------------------------------------------------------------- */
/* Enters comm for a call: ncclSuccess when comm is a live communicator not being closed (its
 * active count is then raised: shim_leave it when done), else the failure (recorded, naming
 * call). */
ncclResult_t shim_enter(ncclComm_t comm, const char *call);
void shim_leave(ncclComm_t comm);
/* Enters comm as shim_enter does, recording nothing: 1 if entered (shim_leave it), 0 if comm is
 * not live or is being closed. */
int shim_try_enter(ncclComm_t comm);
/* A failed group (res, message msg) held calls on comm (entered): a non-blocking comm keeps res
 * as its async error (the first one) and refuses later calls, as NCCL's groupCleanup does. */
void shim_comm_stick(ncclComm_t comm, ncclResult_t res, const char *msg);
/* For an entered comm: ncclSuccess when its init succeeded; ncclInvalidArgument at once while
 * the init waits for its group's end or runs (NCCL's ncclCommEnsureReady), else the init's
 * failure (recorded, naming call). */
ncclResult_t shim_ready(ncclComm_t comm, const char *call);
/* Publishes comm's init result (state) and wakes the calls waiting for it; a failure's message
 * msg (NULL or empty: a generic one) is kept as comm's failmsg. */
void shim_init_finish(ncclComm_t comm, ncclResult_t res, const char *msg);
/* Runs the init of comm in this thread (comm->state gets the result). */
void shim_init_run(ncclComm_t comm);
/* Runs the init of comm in this thread with init_owner SHIM_INIT_RUNNING (set by the caller
 * before a close can see comm): 1 when an ncclCommAbort orphaned it meanwhile (returned at
 * once); the caller then stops touching comm but for shim_init_orphan_end, once it left it. */
int shim_init_run_owned(ncclComm_t comm);
/* Finishes the abort of an orphaned comm: destroys braid's communicator, frees comm. */
void shim_init_orphan_end(ncclComm_t comm);
/* Starts the init of comm on its own thread. */
ncclResult_t shim_init_start_thread(ncclComm_t comm);
/* Waits until comm's init finished or a close started (1), or SHIM_WAIT_LIMIT_S passed (0). */
int shim_init_wait(ncclComm_t comm);
/* Frees comm (its braid communicator destroyed already), or, while group calls still pin it,
 * unlists it and leaves the free to the last shim_redop_release. */
void shim_comm_retire(ncclComm_t comm);
/* Frees comm's struct (unlisting it if listed). */
void shim_comm_free(ncclComm_t comm);
/* Frees a closed communicator once no call is inside it any more (bounded: one that never
 * leaves keeps it allocated); a pinned one is freed by its last release (shim_comm_retire). */
void shim_comm_free_idle(ncclComm_t comm);
/* ncclGroupEnd takes its inits (SHIM_DEFERRED_ENDING): an abort from now on waits for the end
 * to let each go; those aborted before (closing) the end frees without running them. */
void shim_group_claim(ncclComm_t *inits, size_t n);
/* A new communicator struct (listed among the live ones, state ncclInProgress); NULL without
 * memory. id is the init's, NULL for a split. */
ncclComm_t shim_comm_new(int nranks, const ncclUniqueId *id, int rank, int blocking);
/* Checks config as NCCL's parseCommConfig (NULL: the defaults); *blocking_p gets its blocking
 * (1 unless it says 0). */
ncclResult_t shim_check_config(const ncclConfig_t *config, int *blocking_p, const char *call);
/* NCCL's envConfigOverride: NCCL_COMM_BLOCKING=0 or 1 overrides blocking (the config's, the
 * default, or a split's parent's). */
int shim_env_blocking(int blocking);

/* ---- split.c -------------------------------------------------------------------------------- */
/* Runs a split recorded in a group (split_parent) in the calling thread; with refuse (an
 * error), braid is asked for a split it refuses instead, so that the peers' splits fail too,
 * and comm's state becomes refuse. */
void shim_split_run(ncclComm_t comm, ncclResult_t refuse);
/* Runs the splits among inits[0..n) (split_parent set): one thread per parent, each running
 * its parent's splits in call order (braid takes one call at a time per communicator, in the
 * same order on every rank), or inline when there is one parent; returns when all are done,
 * with the first failure. refuse: as shim_split_run's. */
ncclResult_t shim_splits_run(ncclComm_t *inits, size_t n, ncclResult_t refuse);

/* ---- group.c -------------------------------------------------------------------------------- */
typedef enum {
    SHIM_ALLREDUCE,
    SHIM_BROADCAST,
    SHIM_REDUCE,
    SHIM_REDUCE_SCATTER,
    SHIM_ALLGATHER,
    SHIM_ALLTOALL,
    SHIM_GATHER,
    SHIM_SCATTER,
    SHIM_SEND,
    SHIM_RECV
} shim_kind_t;

typedef struct {
    shim_kind_t kind;
    const char *name; /* "ncclAllReduce" */
    ncclComm_t comm;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    braid_datatype_t dtype;
    braid_redop_t op;
    int premul; /* 1 + the comm->redops slot of a PreMulSum op, 0 for none */
    int root;   /* root, or peer for send/recv */
    cudaStream_t stream;
} shim_op_t;

/* Depth of the calling thread's group nesting (0 = none). */
int shim_group_depth(void);
/* NCCL's ncclAsyncLaunch check, for an init or split recorded in an open group (blocking: the
 * new communicator's, a split's parent's): the group's first init, split or operation sets the
 * group's blocking mode (an operation sets it again, unchecked, as NCCL's ncclGroupCommJoin);
 * one that differs is ncclInvalidArgument, recorded in the group. ncclSuccess outside a group. */
ncclResult_t shim_group_mode(int blocking, const char *call);
/* Adds a communicator whose init waits for the outermost ncclGroupEnd. */
ncclResult_t shim_group_add_init(ncclComm_t comm);
/* Runs op now (outside a group) or appends it to the thread's group. */
ncclResult_t shim_submit(const shim_op_t *op);
/* A call whose arguments failed the shim's checks (res, message msg), with the value at fault
 * in op: braid gets it too (now, or at the group's end), so that it takes its place in the
 * call order and the peers are told; returns res with msg as the last error. */
ncclResult_t shim_reject(const shim_op_t *op, ncclResult_t res, const char *msg);
/* Records a call's failure (already reported with shim_fail) inside an open group, so that
 * its ncclGroupEnd fails; returns res. */
ncclResult_t shim_group_fail(ncclResult_t res);
/* Issues op to braid in the calling thread (inside a braid group when one is open). */
braid_result_t shim_op_issue(const shim_op_t *op);

/* ---- coll.c -------------------------------------------------------------------------------- */
/* A call recorded in a group holds its PreMulSum op (op->premul) until it was issued: a
 * ncclRedOpDestroy meanwhile is carried out by the last release. The hold also pins the
 * communicator's struct (see pins), so a release after a close is safe and may free it. */
void shim_redop_hold(const shim_op_t *op);
void shim_redop_release(const shim_op_t *op);

#endif
