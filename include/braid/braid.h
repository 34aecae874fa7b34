/**
 * @file braid.h
 * @brief braid: collective communication for host (and device) buffers.
 *
 * The API follows NCCL's shape: one rank creates a unique id, every rank
 * calls braid_comm_init_rank() with it, then all ranks call the same
 * collectives in the same order. Every entry point checks its arguments and
 * returns a braid_result_t; braid_last_error() gives a message that names the
 * bad argument or the failing peer.
 *
 * Threads (as NCCL): one thread at a time may call a communicator's collectives,
 * braid_comm_split and the braid_i* forms. A call that enters a communicator while
 * another thread is inside one of these on it is refused with
 * BRAID_ERR_INVALID_USAGE naming both calls, and the communicator fails (sticky
 * error, peers told): the order of the two threads' calls is undefined, so they
 * cannot be matched with the peers' calls. Different communicators may be used
 * from different threads at once. Safe from any thread at any time:
 * braid_comm_abort, braid_comm_destroy (see there), braid_comm_get_error,
 * braid_comm_rank/size, braid_comm_register/deregister, and braid_wait/braid_test
 * (each request waited on by one thread).
 *
 * Mismatches: ranks that disagree on a call (collective, count, dtype, op, root,
 * or braid_comm_split against a collective, or a call that only some ranks rejected
 * for bad arguments) get BRAID_ERR_MISMATCH naming both calls, within a wake-up of
 * the first rank that sees the other's message, never a timeout. Each rank's call
 * that still needs a message from a rank that detected the mismatch fails with it; a
 * rank whose own part of the call was already complete (every message it had to
 * receive came from ranks that agreed with it, e.g. a broadcast receiver next to the
 * root) returns success from it, and its next call on the communicator fails with
 * the mismatch. A call rejected by argument checks takes its place in the call order
 * on a communicator of several ranks: if every rank rejected its call of that
 * number, the communicator stays usable; else the rejecting rank gets its
 * BRAID_ERR_INVALID_ARG and the communicator fails with the mismatch everywhere.
 */
#ifndef BRAID_BRAID_H
#define BRAID_BRAID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BRAID_API __attribute__((visibility("default")))
#else
#define BRAID_API
#endif

#define BRAID_VERSION_MAJOR 0
#define BRAID_VERSION_MINOR 1
#define BRAID_VERSION_PATCH 0
/** Version as MAJOR*10000 + MINOR*100 + PATCH. */
#define BRAID_VERSION_CODE                                                                         \
    (BRAID_VERSION_MAJOR * 10000 + BRAID_VERSION_MINOR * 100 + BRAID_VERSION_PATCH)

/** Result codes: 0 is success, 1 is "in progress", negative values are errors. */
typedef enum {
    BRAID_SUCCESS = 0,
    BRAID_INPROGRESS = 1,         /**< a non-blocking operation has not completed yet */
    BRAID_ERR_INVALID_ARG = -1,   /**< a bad argument (the message names it) */
    BRAID_ERR_NOMEM = -2,         /**< out of memory */
    BRAID_ERR_SYSTEM = -3,        /**< a system call failed (the message has errno's text) */
    BRAID_ERR_REMOTE = -4,        /**< a peer died, closed its connection or reported an error */
    BRAID_ERR_TIMEOUT = -5,       /**< a wait passed BRAID_TIMEOUT (the message names the peer) */
    BRAID_ERR_ABORTED = -6,       /**< braid_comm_abort() was called */
    BRAID_ERR_MISMATCH = -7,      /**< ranks called different collectives (names both calls) */
    BRAID_ERR_AUTH = -8,          /**< a peer did not prove it knows the job secret */
    BRAID_ERR_INTERNAL = -9,      /**< a bug in braid */
    BRAID_ERR_UNSUPPORTED = -10,  /**< not built in, or not supported for these arguments */
    BRAID_ERR_INVALID_USAGE = -11 /**< a valid argument used in a wrong state (destroyed comm) */
} braid_result_t;

/** Element types. float16, bfloat16 and the float8 types are reduced in float32 and rounded
 * to nearest even; float8 results saturate to the largest finite value (see the README). */
typedef enum {
    BRAID_INT8 = 0,
    BRAID_UINT8 = 1,
    BRAID_INT32 = 2,
    BRAID_UINT32 = 3,
    BRAID_INT64 = 4,
    BRAID_UINT64 = 5,
    BRAID_FLOAT16 = 6,
    BRAID_BFLOAT16 = 7,
    BRAID_FLOAT32 = 8,
    BRAID_FLOAT64 = 9,
    BRAID_FLOAT8_E4M3 = 10, /**< OCP FP8 e4m3 ("fn": max 448, no inf), as ncclFloat8e4m3 */
    BRAID_FLOAT8_E5M2 = 11, /**< OCP FP8 e5m2 (max 57344, inf and NaN), as ncclFloat8e5m2 */
    BRAID_NUM_DTYPES = 12
} braid_datatype_t;

/** Reduction operations. avg over n ranks: for float16, bfloat16 and float8, as NCCL's ncclAvg,
 * a pre-multiplied sum: each rank's input times the factor (float)(1.0 / n), the product
 * computed in float32 and rounded once to the dtype (float8 saturating), then summed as
 * BRAID_SUM, so no partial sum exceeds the inputs' range (avg(40000, 40000, 40000) in float16
 * is 40000, not inf); for float32 and float64 the sum divided by n at the last step (one IEEE
 * division: a sum beyond the dtype's range overflows, avg(3e38, 3e38) is inf, where NCCL
 * pre-multiplies; use a PreMulSum op with 1/n for that form); for the integer dtypes the
 * wrapped sum divided by n, truncating toward zero, as NCCL. Values >= BRAID_NUM_OPS are ops
 * made by braid_redop_create_premulsum, valid only on their communicator. */
typedef enum {
    BRAID_SUM = 0,
    BRAID_PROD = 1,
    BRAID_MIN = 2,
    BRAID_MAX = 3,
    BRAID_AVG = 4,
    BRAID_NUM_OPS = 5
} braid_redop_t;

#define BRAID_UNIQUE_ID_BYTES 128
/** Opaque bootstrap handle: root address, port and a random 128-bit job secret. */
typedef struct {
    char internal[BRAID_UNIQUE_ID_BYTES];
} braid_unique_id_t;

typedef struct braid_comm *braid_comm_t;
typedef struct braid_request *braid_request_t;
/** A user buffer registered with a communicator (braid_comm_register). */
typedef struct braid_reg *braid_reg_t;

/** Returns BRAID_VERSION_CODE of the library actually linked. */
BRAID_API int braid_version(void);
/** Static text for a result code (never NULL). */
BRAID_API const char *braid_strerror(braid_result_t res);
/** The calling thread's message for its last failed call ("" if none). */
BRAID_API const char *braid_last_error(void);
/** Name of a dtype / op ("float32", "sum"), or "invalid". */
BRAID_API const char *braid_dtype_name(braid_datatype_t dtype);
BRAID_API const char *braid_op_name(braid_redop_t op);
/** Size in bytes of one element, 0 for an invalid dtype. */
BRAID_API size_t braid_dtype_size(braid_datatype_t dtype);

/**
 * Creates a unique id on the root rank: opens the bootstrap listener (on
 * BRAID_SOCKET_IFNAME's address, or the address of the default route) and
 * draws the job secret. Send the id to the other ranks out of band.
 */
BRAID_API braid_result_t braid_get_unique_id(braid_unique_id_t *id_p);
/**
 * Makes the unique id of a bootstrap root at a fixed address, as NCCL_COMM_ID does: every rank
 * may call it with the same root and gets the same id, so no out-of-band exchange is needed.
 * Nothing starts here: rank 0 of the communicator that braid_comm_init_rank() creates from
 * this id opens the root service on that address during its init (the port must be free on
 * rank 0's host; the other ranks retry until it listens, within BRAID_TIMEOUT). root is
 * "host:port" or "[v6addr]:port" (the grammar of BRAID_ROOT). The job secret comes from
 * BRAID_SECRET (32 hex digits, set by braid-run), else it is derived from root and the job
 * identifiers, with a warning that the bootstrap is then not authenticated.
 */
BRAID_API braid_result_t braid_unique_id_from_root(const char *root, braid_unique_id_t *id_p);
/** Formats an id as "host:port" (no secret) for logs. */
BRAID_API braid_result_t braid_unique_id_str(const braid_unique_id_t *id, char *buf, size_t len);

/** Collective: every rank of the job calls it with the same id and nranks. */
BRAID_API braid_result_t braid_comm_init_rank(braid_comm_t *comm_p, int nranks,
                                              braid_unique_id_t id, int rank);
/**
 * Creates a communicator from the environment: BRAID_RANK/BRAID_NRANKS/BRAID_ROOT
 * (host:port) and BRAID_SECRET, or torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT,
 * Open MPI's OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS
 * (with BRAID_ROOT or MASTER_ADDR/MASTER_PORT for the root's address).
 */
BRAID_API braid_result_t braid_comm_init_env(braid_comm_t *comm_p);
/**
 * Frees a communicator. Not collective. Safe from another thread: calls in flight on
 * comm are aborted (they return BRAID_ERR_ABORTED saying the communicator was
 * destroyed; peers see an error as for braid_comm_abort), destroy waits until they
 * returned, then frees. Queued non-blocking operations complete with that error; their
 * requests stay valid until braid_wait/braid_test. Using comm afterwards returns
 * BRAID_ERR_INVALID_USAGE: destroyed communicators' memory is kept in a quarantine of
 * the last 64, so their handles are never reused by a new communicator while there; a
 * handle destroyed longer ago than that is undefined behaviour (as any freed pointer).
 * Destroying twice returns BRAID_ERR_INVALID_USAGE under the same limit.
 */
BRAID_API braid_result_t braid_comm_destroy(braid_comm_t comm);
/**
 * Aborts every operation on comm: safe from another thread and from a signal-free
 * context; blocked calls return BRAID_ERR_ABORTED promptly, later calls fail too.
 * Peers are told at once: a peer's call fails (BRAID_ERR_REMOTE naming this rank) when
 * it needs a message this rank did not send before the abort. A peer whose call in
 * flight had already received everything it needs from this rank (say a 1-element
 * all-reduce whose data this rank sent before aborting) completes that call normally,
 * with correct results, and gets the error from its next call on the communicator.
 */
BRAID_API braid_result_t braid_comm_abort(braid_comm_t comm);
/**
 * Registers the user buffer [buf, buf + bytes) with comm's transports, in the style of
 * ncclCommRegister. With the RDMA transport the memory is pinned and registered with the
 * device now (errors such as the locked-memory limit show here) and kept in a registration
 * cache; transports that need no registration (shm, tcp) return a valid handle that does
 * nothing. bytes == 0 gives a handle that does nothing. Overlapping registrations are
 * allowed; each needs its own deregister. Not collective; thread-safe.
 *
 * Used today by the RDMA transport for zero-copy receives: in ring all-gather and broadcast,
 * a chunk whose destination is a registered output buffer is written by the sender's NIC
 * straight into it (no copy out of a staging slot); other collectives and unregistered
 * buffers go through the staging slots.
 *
 * The buffer must stay allocated until braid_comm_deregister(comm, handle) returns:
 * deregister BEFORE freeing or unmapping it. A registration that outlived its memory would
 * let the NIC write into whatever memory the addresses map to later; braid does not watch
 * free()/munmap(). braid_comm_destroy deregisters handles still registered (with a warning).
 */
BRAID_API braid_result_t braid_comm_register(braid_comm_t comm, void *buf, size_t bytes,
                                             braid_reg_t *handle_p);
/** Drops a registration made on comm; the handle is invalid afterwards (BRAID_ERR_INVALID_ARG
 * for a handle that is not registered on comm, e.g. deregistered twice). */
BRAID_API braid_result_t braid_comm_deregister(braid_comm_t comm, braid_reg_t handle);
/** Allocates bytes (> 0) of host memory that every rank of this host can map (as
 * ncclMemAlloc): a shared region (a memfd, page-aligned, zero-filled) that the direct
 * shared-memory collectives read in place when a call's send buffer lies inside one, instead
 * of first copying it into braid's segments (any other buffer works too, with that copy); when
 * an all-reduce's receive buffer lies in one, the peers write their reduced slices straight
 * into it, instead of this rank copying them out of their segments.
 * Peers open the region through /proc/<pid>/fd; where some rank of the communicator cannot
 * (a non-dumpable process, no CAP_SYS_PTRACE across user namespaces: probed at
 * communicator setup), the region is copied in like any other buffer. Not tied to a communicator;
 * thread-safe. *ptr_p is set only on success. The first call in which a peer reads a region
 * maps it whole, faulting in the pages that call uses; the peer keeps it mapped (read-write)
 * until its communicator is destroyed, until the region was freed and its descriptor number
 * reused, or until it is the least recently used of more than max(128, 2 x nranks + 8)
 * regions the peer mapped on that communicator, so its pages are returned to the system only
 * then. A call that fails returns once its peers stopped using its buffers (it waits for them
 * up to the communicator's timeout, 100 ms once it is aborted, then a warning names a peer
 * still in the call), so they are the caller's again after an error as after success. */
BRAID_API braid_result_t braid_mem_alloc(void **ptr_p, size_t bytes);
/** Frees memory from braid_mem_alloc (NULL is a no-op); any other pointer, or one freed
 * already, is BRAID_ERR_INVALID_ARG. Not during a collective that uses it. */
BRAID_API braid_result_t braid_mem_free(void *ptr);
/** The communicator's sticky asynchronous error (BRAID_SUCCESS if none). */
BRAID_API braid_result_t braid_comm_get_error(braid_comm_t comm, braid_result_t *err_p,
                                              const char **msg_p);
BRAID_API braid_result_t braid_comm_rank(braid_comm_t comm, int *rank_p);
BRAID_API braid_result_t braid_comm_size(braid_comm_t comm, int *size_p);

/**
 * Sets comm's per-operation timeout: how many seconds a wait inside a collective (or
 * point-to-point operation) on a live but silent peer may last before BRAID_ERR_TIMEOUT,
 * as BRAID_TIMEOUT does for every communicator at init. Applies to operations started
 * afterwards, on comm and on the sub-communicators braid made for it; communicators
 * braid_comm_split makes from comm start with it. timeout_s must be > 0 and finite
 * (BRAID_ERR_INVALID_ARG); values above 1e9 s (about 32 years, what BRAID_TIMEOUT=0 means) are
 * taken as 1e9, which braid_comm_get_timeout then returns. BRAID_ERR_INVALID_USAGE while a
 * non-blocking operation is pending.
 * Not thread-safe with a blocking collective on comm in another thread.
 */
BRAID_API braid_result_t braid_comm_set_timeout(braid_comm_t comm, double timeout_s);
/** comm's per-operation timeout in seconds (BRAID_TIMEOUT or braid_comm_set_timeout's). */
BRAID_API braid_result_t braid_comm_get_timeout(braid_comm_t comm, double *timeout_s_p);

/** The color that makes braid_comm_split return no communicator (NULL) to the caller. */
#define BRAID_SPLIT_NOCOLOR (-1)
/**
 * Collective over comm (as MPI_Comm_split / ncclCommSplit): the ranks that pass the same
 * color form a new communicator, ranked by (key, rank in comm). A negative color
 * (BRAID_SPLIT_NOCOLOR) joins no group and sets *newcomm_p to NULL. Operations pending on
 * comm complete first. The new communicator is independent of comm: destroy each one. A split
 * takes its place in comm's call order: a rank that calls a collective where the others split
 * gets BRAID_ERR_MISMATCH (and so do they).
 */
BRAID_API braid_result_t braid_comm_split(braid_comm_t comm, int color, int key,
                                          braid_comm_t *newcomm_p);

/**
 * Creates a PreMulSum reduction operation on comm (ncclRedOpCreatePreMulSum with
 * ncclScalarHostImmediate): a collective given it computes the sum over ranks of
 * scalar_r * input_r, each rank's input multiplied by that rank's scalar (ranks may pass
 * different scalars) in the element type, rounded once (integers wrap), then summed as
 * BRAID_SUM does. scalar points to one element of dtype in host memory, read now. The op
 * (a value >= BRAID_NUM_OPS) is valid for collectives on comm with this dtype, in every
 * reducing collective and algorithm, until braid_redop_destroy; another communicator, another
 * dtype or a destroyed op gives BRAID_ERR_INVALID_ARG. Not collective. *op_p is set only on
 * success.
 */
BRAID_API braid_result_t braid_redop_create_premulsum(braid_redop_t *op_p, const void *scalar,
                                                      braid_datatype_t dtype, braid_comm_t comm);
/** Destroys an op made by braid_redop_create_premulsum on comm. Calls already started with it
 * (braid_i* included) are not affected. BRAID_ERR_INVALID_ARG for a built-in op, an op of
 * another communicator or one destroyed already. */
BRAID_API braid_result_t braid_redop_destroy(braid_redop_t op, braid_comm_t comm);

/* Collectives. Blocking; sendbuf == recvbuf means in place. */
BRAID_API braid_result_t braid_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                         braid_datatype_t dtype, braid_redop_t op,
                                         braid_comm_t comm);
BRAID_API braid_result_t braid_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                         braid_datatype_t dtype, int root, braid_comm_t comm);
BRAID_API braid_result_t braid_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                      braid_datatype_t dtype, braid_redop_t op, int root,
                                      braid_comm_t comm);
/** recvcount elements per rank: sendbuf holds nranks*recvcount; in place when
 * recvbuf == sendbuf + rank*recvcount*size. */
BRAID_API braid_result_t braid_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                              braid_datatype_t dtype, braid_redop_t op,
                                              braid_comm_t comm);
/** sendcount elements per rank: recvbuf holds nranks*sendcount; in place when
 * sendbuf == recvbuf + rank*sendcount*size. */
BRAID_API braid_result_t braid_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                         braid_datatype_t dtype, braid_comm_t comm);
BRAID_API braid_result_t braid_barrier(braid_comm_t comm);

/* Non-blocking forms: operations on one comm complete in the order they were
 * started; buffers must stay valid until braid_wait/braid_test says done. */
BRAID_API braid_result_t braid_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                          braid_datatype_t dtype, braid_redop_t op,
                                          braid_comm_t comm, braid_request_t *req_p);
BRAID_API braid_result_t braid_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                          braid_datatype_t dtype, int root, braid_comm_t comm,
                                          braid_request_t *req_p);
BRAID_API braid_result_t braid_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                       braid_datatype_t dtype, braid_redop_t op, int root,
                                       braid_comm_t comm, braid_request_t *req_p);
BRAID_API braid_result_t braid_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                               braid_datatype_t dtype, braid_redop_t op,
                                               braid_comm_t comm, braid_request_t *req_p);
BRAID_API braid_result_t braid_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                          braid_datatype_t dtype, braid_comm_t comm,
                                          braid_request_t *req_p);
BRAID_API braid_result_t braid_ibarrier(braid_comm_t comm, braid_request_t *req_p);
/**
 * Waits for req and frees it; returns the operation's result. Requests do not depend on
 * their communicator once complete: after braid_comm_destroy, a request of that
 * communicator returns BRAID_ERR_ABORTED ("the communicator was destroyed ...") or the
 * result it had. A request that is never waited on stays allocated (about 600 bytes)
 * until the process exits. Waiting again on a request that braid_wait/braid_test
 * returned, or from two threads at once, is BRAID_ERR_INVALID_USAGE: returned requests
 * are kept in a quarantine of the last 256 (beyond that, a stale handle is undefined
 * behaviour, as any freed pointer). A request of a call in a group that is still open on the
 * calling thread completes at its braid_group_end: braid_wait and braid_test on it there are
 * BRAID_ERR_INVALID_USAGE (the request stays valid).
 */
BRAID_API braid_result_t braid_wait(braid_request_t req);
/** Sets *done_p; when done, req is freed and the operation's result returned (as
 * braid_wait, with its checks of stale handles). */
BRAID_API braid_result_t braid_test(braid_request_t req, int *done_p);
/** braid_wait and braid_test that also give, once req is done, when the operation completed:
 * CLOCK_MONOTONIC seconds (clock_gettime's), stamped by braid as it finished the operation,
 * whatever its result. That can be long before a thread that polls between computations sees
 * it (a DDP layer's timeline). t_done_p may be NULL; it is written only when req is done. */
BRAID_API braid_result_t braid_wait_time(braid_request_t req, double *t_done_p);
BRAID_API braid_result_t braid_test_time(braid_request_t req, int *done_p, double *t_done_p);

/* ---- GPU buffers and streams (see README "GPU buffers and streams") -----------------------
 * Every collective accepts CUDA device buffers, detected per call. A communicator uses the CUDA
 * device that was current when it was initialised; buffers of another device, or host and
 * device buffers mixed in one call, are BRAID_ERR_INVALID_ARG; device buffers where braid has
 * no device (built without CUDA, no driver or GPU, BRAID_CUDA=0) are BRAID_ERR_UNSUPPORTED.
 * Several ranks may share one GPU (processes, or communicators of one process). The blocking
 * and braid_i* forms read device buffers when they run (finish the kernels that write them
 * first) and the blocking form returns when the result is in place. Where the device engine
 * runs a reducing collective (allreduce, reduce, reduce_scatter; all ranks on one host, not
 * float8 or PreMulSum, BRAID_DEV_ENGINE not "stage"; before a communicator's first device
 * collective has set the engine up, wherever it may run it), its device buffers must be aligned
 * to their element size (a float32 buffer to 4 bytes), as the GPU loads whole elements:
 * BRAID_ERR_INVALID_ARG names the buffer otherwise, and the peers' call fails too. Calls
 * staged through host memory, and host buffers, take any address (as NCCL). A stream-ordered
 * call refused before it is queued (a stream under graph capture) also fails the peers' call
 * of that number at once, naming the reason. */

/** A cudaStream_t (NULL is the legacy default stream). */
typedef void *braid_stream_t;

/** CUDA devices braid sees in this process (0 when built without CUDA or without a GPU). */
BRAID_API int braid_cuda_device_count(void);

/**
 * Device memory (cudaMalloc) on the calling thread's current CUDA device, for the buffers of
 * collectives (the NCCL drop-in's ncclMemAlloc). BRAID_ERR_INVALID_ARG for a NULL ptr_p or
 * 0 bytes, BRAID_ERR_UNSUPPORTED where braid sees no device (the message says why),
 * BRAID_ERR_NOMEM when the device has no room. Free with braid_cuda_mem_free.
 */
BRAID_API braid_result_t braid_cuda_mem_alloc(void **ptr_p, size_t bytes);
/** Frees memory from braid_cuda_mem_alloc (NULL is a no-op); BRAID_ERR_INVALID_ARG for a
 *  pointer that is not device memory. */
BRAID_API braid_result_t braid_cuda_mem_free(void *ptr);

/**
 * Stream-ordered forms (as NCCL's): enqueue the collective after the work already on stream and
 * return at once; later work on stream runs after the result is in place. Failures surface as
 * the communicator's async error (braid_comm_get_error) and from the next call on it; the
 * stream is released even then. With host buffers the call waits for stream's work, then runs
 * and returns when done. BRAID_ERR_UNSUPPORTED when the communicator has no CUDA device, and
 * when stream is being captured into a CUDA graph (the progress is host-driven, so a replay
 * would not run the collective): call these outside a capture.
 */
BRAID_API braid_result_t braid_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                braid_datatype_t dtype, braid_redop_t op,
                                                braid_comm_t comm, braid_stream_t stream);
BRAID_API braid_result_t braid_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                                braid_datatype_t dtype, int root, braid_comm_t comm,
                                                braid_stream_t stream);
BRAID_API braid_result_t braid_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                             braid_datatype_t dtype, braid_redop_t op, int root,
                                             braid_comm_t comm, braid_stream_t stream);
BRAID_API braid_result_t braid_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                                     size_t recvcount, braid_datatype_t dtype,
                                                     braid_redop_t op, braid_comm_t comm,
                                                     braid_stream_t stream);
BRAID_API braid_result_t braid_allgather_stream(const void *sendbuf, void *recvbuf,
                                                size_t sendcount, braid_datatype_t dtype,
                                                braid_comm_t comm, braid_stream_t stream);

/**
 * Waits until the work queued on stream so far is done (bounded by the communicator's timeout,
 * ended by braid_comm_abort): a blocking call made after it reads what that work wrote (the
 * NCCL drop-in orders its blocking calls on the caller's stream this way). A communicator
 * without a CUDA device has no stream work to wait for: BRAID_SUCCESS at once.
 * BRAID_ERR_INVALID_ARG for a stream CUDA does not know.
 */
BRAID_API braid_result_t braid_comm_stream_wait(braid_comm_t comm, braid_stream_t stream);

/* ---- Point-to-point, groups and the collectives built on them ------------------------------
 * Counts and displacements are in elements of dtype. These calls follow NCCL's semantics. */

/**
 * Sends count elements to rank peer (any rank of comm, itself included). Messages between a
 * pair of ranks arrive in the order they were sent; the receiver's braid_recv must name the same
 * count and dtype (else BRAID_ERR_MISMATCH naming both calls). Returns once sendbuf may be
 * reused: small messages are buffered, a large one waits for the receiver. Outside a group a
 * blocking send and the matching receive must not wait on each other in a cycle: post such
 * exchanges inside braid_group_start()/braid_group_end() or with braid_isend/braid_irecv.
 */
BRAID_API braid_result_t braid_send(const void *sendbuf, size_t count, braid_datatype_t dtype,
                                    int peer, braid_comm_t comm);
/** Receives count elements from rank peer into recvbuf (see braid_send). */
BRAID_API braid_result_t braid_recv(void *recvbuf, size_t count, braid_datatype_t dtype, int peer,
                                    braid_comm_t comm);
/**
 * Non-blocking forms: the operation runs on the communicator's worker thread; every
 * point-to-point operation the worker holds progresses at the same time (so isend to one rank
 * and irecv from another never wait on each other), in order per pair and direction.
 */
BRAID_API braid_result_t braid_isend(const void *sendbuf, size_t count, braid_datatype_t dtype,
                                     int peer, braid_comm_t comm, braid_request_t *req_p);
BRAID_API braid_result_t braid_irecv(void *recvbuf, size_t count, braid_datatype_t dtype, int peer,
                                     braid_comm_t comm, braid_request_t *req_p);

/**
 * Groups (as ncclGroupStart/ncclGroupEnd): per thread, nestable. Between the outermost
 * braid_group_start() and its braid_group_end(), calls are checked and deferred: blocking calls
 * return BRAID_SUCCESS at once, braid_i* calls return a request. braid_group_end() then runs the
 * group as one batch: each communicator's collectives in call order, then all of its
 * point-to-point operations at the same time (a ring of sends and receives posted in any order
 * never deadlocks); several communicators of a group run concurrently. It returns when the
 * whole group completed (the requests are then done), or the first error naming the call
 * ("group call 3 (recv from rank 2): ..."). An argument error is also returned by the call
 * itself; the group then runs nothing. Consecutive small all-reduces of one dtype and op run as
 * one all-reduce of their inputs packed together (BRAID_GROUP_FUSE_BYTES; same results, set it
 * alike on every rank).
 */
BRAID_API braid_result_t braid_group_start(void);
BRAID_API braid_result_t braid_group_end(void);
/**
 * Rejects the calling thread's open group as a call that failed its argument checks would:
 * its outermost braid_group_end() then issues none of the group's calls, still gives them
 * their places in each communicator's call order and tells the peers (their matching calls
 * fail naming the rejection and @p reason, instead of waiting for this rank or pairing with
 * its next calls), and returns @p err with @p reason as its message. For a layer above braid
 * that drops a group it recorded for a reason of its own (a call it refused before reaching
 * braid). As for any rejected group, the communicators stay usable when every rank rejected
 * the same calls, and fail otherwise. The group's first failure stands: a group already
 * rejected by a call keeps that call's error and message.
 * @param err a negative braid_result_t
 * @param reason the message (not NULL; the first 1 KiB is kept)
 * @return BRAID_SUCCESS; BRAID_ERR_INVALID_USAGE with no open group; BRAID_ERR_INVALID_ARG for
 *         err >= 0 or reason NULL
 */
BRAID_API braid_result_t braid_group_reject(braid_result_t err, const char *reason);

/** count elements per peer: sendbuf holds nranks blocks of count (block j goes to rank j),
 * recvbuf receives block i from rank i. sendbuf == recvbuf is in place (braid copies the input
 * first). */
BRAID_API braid_result_t braid_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                        braid_datatype_t dtype, braid_comm_t comm);
/** Per-peer counts and displacements (nranks entries each): sendcounts[j] elements from
 * sendbuf + sdispls[j] go to rank j, recvcounts[i] elements from rank i land at recvbuf +
 * rdispls[i]. sendcounts[j] on rank i must equal recvcounts[i] on rank j. Receive blocks that
 * overlap (both non-empty) are BRAID_ERR_INVALID_ARG. */
BRAID_API braid_result_t braid_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                         const size_t *sdispls, void *recvbuf,
                                         const size_t *recvcounts, const size_t *rdispls,
                                         braid_datatype_t dtype, braid_comm_t comm);
/** The root receives sendcount elements from every rank, rank i's at recvbuf + i*sendcount
 * (recvbuf is used on the root only); in place when the root's sendbuf == recvbuf +
 * root*sendcount. */
BRAID_API braid_result_t braid_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      braid_datatype_t dtype, int root, braid_comm_t comm);
/** The root sends block i (recvcount elements at sendbuf + i*recvcount) to rank i (sendbuf is
 * used on the root only); in place when the root's recvbuf == sendbuf + root*recvcount. */
BRAID_API braid_result_t braid_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       braid_datatype_t dtype, int root, braid_comm_t comm);
/** Every rank receives rank i's recvcounts[i] elements at recvbuf + displs[i]; this rank's
 * sendcount must equal recvcounts[rank]. In place when sendbuf == recvbuf + displs[rank].
 * Receive blocks that overlap (both non-empty) are BRAID_ERR_INVALID_ARG. */
BRAID_API braid_result_t braid_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                          const size_t *recvcounts, const size_t *displs,
                                          braid_datatype_t dtype, braid_comm_t comm);
/** sendbuf holds nranks blocks back to back, block i of recvcounts[i] elements; rank i receives
 * the reduction of every rank's block i (reduced in rank order). In place when recvbuf ==
 * sendbuf + (recvcounts[0] + ... + recvcounts[rank-1]) elements. */
BRAID_API braid_result_t braid_reduce_scatterv(const void *sendbuf, void *recvbuf,
                                               const size_t *recvcounts, braid_datatype_t dtype,
                                               braid_redop_t op, braid_comm_t comm);
/** Non-blocking forms of the collectives above (braid_wait / braid_test complete them). The
 * count and displacement arrays of the v forms are copied before the call returns. */
BRAID_API braid_result_t braid_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                         braid_datatype_t dtype, braid_comm_t comm,
                                         braid_request_t *req_p);
BRAID_API braid_result_t braid_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                          const size_t *sdispls, void *recvbuf,
                                          const size_t *recvcounts, const size_t *rdispls,
                                          braid_datatype_t dtype, braid_comm_t comm,
                                          braid_request_t *req_p);
BRAID_API braid_result_t braid_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       braid_datatype_t dtype, int root, braid_comm_t comm,
                                       braid_request_t *req_p);
BRAID_API braid_result_t braid_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        braid_datatype_t dtype, int root, braid_comm_t comm,
                                        braid_request_t *req_p);
BRAID_API braid_result_t braid_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                           const size_t *recvcounts, const size_t *displs,
                                           braid_datatype_t dtype, braid_comm_t comm,
                                           braid_request_t *req_p);
BRAID_API braid_result_t braid_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                                const size_t *recvcounts, braid_datatype_t dtype,
                                                braid_redop_t op, braid_comm_t comm,
                                                braid_request_t *req_p);

#ifdef __cplusplus
}
#endif
#endif /* BRAID_BRAID_H */
