/**
 * @file ddp.h
 * @brief braid_ddp: a minimal data-parallel training layer (in the manner of PyTorch's
 * DistributedDataParallel) on braid's public API. Library libbraid_ddp, linked to libbraid.
 *
 * Every rank holds a full replica of the model. The model's parameters are registered once
 * (parameter buffer, gradient buffer, count, dtype); the layer groups their gradients into
 * flat buckets and all-reduces each bucket with braid_iallreduce as soon as all of its
 * gradients are final, so communication overlaps the rest of the backward pass.
 *
 * A training step:
 * @code
 *   braid_ddp_zero_grad(ddp);
 *   forward(...);
 *   for (each parameter i, in the order backward produces its gradient) {
 *       compute gradient i;
 *       braid_ddp_grad_ready(ddp, i);   // may start a bucket's all-reduce
 *   }
 *   braid_ddp_finish(ddp);              // waits; every gradient buffer holds the average
 *   optimizer_step(...);
 * @endcode
 *
 * Buckets. Parameters are assigned to buckets in reverse registration order (the order in which
 * backward usually produces gradients), one dtype per bucket. A bucket is closed when the next
 * parameter would push it past its capacity: the first bucket's capacity is
 * first_bucket_bytes (default 1 MiB, so the first all-reduce starts early), the others'
 * bucket_cap_bytes (default 25 MiB). A parameter larger than the capacity gets a bucket of its
 * own. The assignment is computed at creation and is the same on every rank (creation checks
 * that every rank registered the same counts and dtypes with the same options).
 *
 * Launch order. Bucket b's all-reduce is started when all its gradients are ready AND buckets
 * 0..b-1 have been started: a later bucket that becomes ready first waits, so every rank issues
 * the same collectives in the same order whatever order its gradients arrive in.
 *
 * Not thread-safe: one thread drives one braid_ddp_t. The communicator should not be used for
 * other collectives between the first grad_ready of a step and finish.
 */
#ifndef BRAID_DDP_H
#define BRAID_DDP_H

#include "braid/braid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct braid_ddp *braid_ddp_t;

/** One registered parameter. */
typedef struct {
    void *param;  /**< the parameter (broadcast from rank 0 at creation) */
    void *grad;   /**< its gradient buffer; unused (may be NULL) with grad_as_bucket_view */
    size_t count; /**< elements (> 0) */
    braid_datatype_t dtype; /**< element type of both buffers */
    const char *name;       /**< optional, used in error messages ("param 3" if NULL) */
    size_t rows;            /**< shape for hooks that need it (PowerSGD): 0 or 1 = a vector, else a
                                 rows x (count / rows) row-major matrix (count % rows must be 0) */
} braid_ddp_param_t;

/** A flat bucket, as a communication hook sees it. */
typedef struct {
    int index;              /**< bucket index, 0 = launched first */
    void *data;             /**< count elements of dtype: the bucket's gradients, back to back */
    size_t count;           /**< elements in the bucket */
    braid_datatype_t dtype; /**< the bucket's element type */
    braid_redop_t op;       /**< BRAID_AVG or BRAID_SUM, from the options */
    braid_comm_t comm;      /**< the layer's communicator */
    int nparams;            /**< parameters in the bucket */
    const int *params;      /**< their indices, in offset order: data holds their gradients back
                                 to back (params[0]'s first) */
    const braid_ddp_param_t *param_defs; /**< every registered parameter (the layer's copy),
                                              index with params[k]: counts, rows */
} braid_ddp_bucket_t;

/**
 * A per-bucket communication hook (default: braid_iallreduce of the bucket in place with
 * bucket->op). launch() starts the reduction and sets *req_p to a request on bucket->comm that
 * the layer waits for (or NULL if it completed synchronously). complete(), if not NULL, runs
 * after the last request has completed, before the gradients are read (e.g. to decompress).
 * When it returns, bucket->data must hold the reduced gradients (averaged if op is BRAID_AVG).
 * Hooks run in bucket order on the thread that drives the layer; an error they return fails
 * the step (with braid_last_error()'s message).
 *
 * Two kinds of hook. Without next() (NULL), complete() runs only inside braid_ddp_finish, after
 * every bucket of the step has been launched, so it may itself run collectives on bucket->comm
 * (every rank then issues them in the same order), but they do not overlap backward.
 *
 * With next() (a second collective per bucket, e.g. PowerSGD's Q all-reduce): next() runs
 * after launch()'s request has completed, at a point of the step that is the same on every
 * rank: just before the layer launches bucket index + 1 (in the grad_ready that completes it;
 * the layer waits there for launch()'s request if it has not completed yet), or in
 * braid_ddp_finish for the last bucket. It may start one more collective on bucket->comm and
 * set *req_p to its request (or NULL), so the collectives of a step are issued in the order
 * launch(0), next(0), launch(1), next(1), ... on every rank. complete() then runs as soon as the
 * layer observes that request completed (in grad_ready, braid_ddp_poll or finish) and must not
 * run collectives.
 */
typedef struct {
    braid_result_t (*launch)(void *state, const braid_ddp_bucket_t *bucket, braid_request_t *req_p);
    braid_result_t (*complete)(void *state, const braid_ddp_bucket_t *bucket);
    void *state;
    braid_result_t (*next)(void *state, const braid_ddp_bucket_t *bucket, braid_request_t *req_p);
} braid_ddp_hook_t;

/** Options; fill with braid_ddp_options_init() first, then change fields. */
typedef struct {
    size_t bucket_cap_bytes;      /**< capacity of buckets after the first (25 MiB) */
    size_t first_bucket_bytes;    /**< capacity of the first bucket (1 MiB) */
    braid_redop_t op;             /**< BRAID_AVG (default) or BRAID_SUM of the ranks' gradients */
    int grad_as_bucket_view;      /**< gradients live inside the buckets (no copies); default 0 */
    int find_unused_parameters;   /**< finish() reduces never-readied gradients as zeros (else
                                       it is an error naming them); default 0 */
    int broadcast_params;         /**< broadcast parameters from rank 0 at creation (default 1) */
    const braid_ddp_hook_t *hook; /**< NULL = the default all-reduce; copied at creation */
    int zero_stage;      /**< 0 (default): plain DDP. 1: ZeRO stage 1, see braid_ddp_shard. 2: ZeRO
                              stage 2, see braid_ddp_grad_buffer */
    int staging_buffers; /**< ZeRO-2: gradient staging buffers kept, each sized for the buckets
                              that use it (default 2), see braid_ddp_grad_buffer */
} braid_ddp_options_t;

/** Sets the defaults listed in braid_ddp_options_t. */
BRAID_API void braid_ddp_options_init(braid_ddp_options_t *opts);

/**
 * Collective over comm: creates the layer for nparams parameters (the array is copied; the
 * buffers must stay valid until braid_ddp_destroy), computes the bucket assignment, checks
 * that every rank registered the same parameter counts, dtypes and rows and the same options
 * that decide the collectives (bucket sizes, op, find_unused_parameters, zero_stage,
 * broadcast_params, and whether a hook is set and has next() and complete()), else
 * BRAID_ERR_MISMATCH on every rank, and broadcasts every parameter from rank 0. With
 * grad_as_bucket_view the gradients start zeroed inside the buckets (braid_ddp_grad gives
 * their addresses). opts NULL = defaults. comm stays the caller's (not destroyed here).
 */
BRAID_API braid_result_t braid_ddp_create(braid_ddp_t *ddp_p, braid_comm_t comm,
                                          const braid_ddp_param_t *params, int nparams,
                                          const braid_ddp_options_t *opts);
/** Waits for reductions in flight (their errors are dropped) and frees the layer. */
BRAID_API void braid_ddp_destroy(braid_ddp_t ddp);

/**
 * Marks parameter i's gradient final for this step. When that completes a bucket (and every
 * earlier bucket has been started) the bucket's reduction is started. Errors: i out of range
 * or already ready this step (BRAID_ERR_INVALID_ARG / BRAID_ERR_INVALID_USAGE, the layer stays
 * usable), and any error of the communicator or hook (the layer is failed from then on and
 * returns that error from every later call). Failures. When the error started on this rank
 * (a hook's error, a collective that could not be started, out of memory) the peers may be
 * waiting in a collective this rank will not join: the layer aborts the communicator
 * (braid_comm_abort), so they get an error promptly instead of at their timeout (the same
 * holds for braid_ddp_gather_params and braid_ddp_localsgd_step/sync). An error reported by
 * the communicator from a peer (BRAID_ERR_REMOTE, BRAID_ERR_ABORTED) does not abort again.
 */
BRAID_API braid_result_t braid_ddp_grad_ready(braid_ddp_t ddp, int i);
/**
 * Ends the step: waits for every bucket, and leaves the reduced gradient in every gradient
 * buffer. If some gradient was never marked ready: with find_unused_parameters it is reduced
 * as zeros (its buffer is zeroed first), unless it was marked ready in a no_sync step since
 * the last reducing finish: then the gradient accumulated so far is reduced (as in PyTorch,
 * a parameter used in some micro-batches keeps their gradients); otherwise
 * BRAID_ERR_INVALID_USAGE naming the
 * parameters, and since the ranks may then disagree on the collectives to call, the
 * communicator is aborted (peers get an error instead of waiting) and the layer is failed.
 * Inside no_sync it only resets the step (no communication).
 */
BRAID_API braid_result_t braid_ddp_finish(braid_ddp_t ddp);

/**
 * Non-blocking: notes the reductions of this step that have completed (as grad_ready does) and
 * runs what follows them that needs no collective (a hook's complete() when it has next()), so
 * a caller with long stretches of computation between grad_ready calls can keep them moving.
 * Does nothing between steps or inside no_sync. Errors as grad_ready's (the layer is failed).
 */
BRAID_API braid_result_t braid_ddp_poll(braid_ddp_t ddp);

/**
 * no_sync: while enabled (1), steps do not communicate: grad_ready only records readiness and
 * finish resets it, so gradients accumulate locally (the caller's backward adds into them).
 * The first step after disabling (0) reduces the accumulated gradients. Only between steps.
 */
BRAID_API braid_result_t braid_ddp_no_sync(braid_ddp_t ddp, int enable);

/** Address of parameter i's gradient (the bucket view, or the registered buffer); NULL if
 * i is out of range. ZeRO-2 with grad_as_bucket_view: its staging slot while its bucket holds
 * one in this step (see braid_ddp_grad_buffer), else NULL. */
BRAID_API void *braid_ddp_grad(braid_ddp_t ddp, int i);
/** Zeroes every gradient (the buffers grad_ready reads). */
BRAID_API void braid_ddp_zero_grad(braid_ddp_t ddp);

/** Bucket layout and the last step's timing (CLOCK_MONOTONIC seconds). */
typedef struct {
    size_t count;           /**< elements */
    size_t bytes;           /**< count * dtype size */
    braid_datatype_t dtype; /**< element type */
    int nparams;            /**< parameters in the bucket */
    const int *params;      /**< their indices, in bucket order (offset order); owned by ddp */
    double t_ready;         /**< last step: when its last gradient became ready */
    double t_launch;        /**< last step: when its reduction was started */
    double t_done;          /**< last step: when its reduction completed (braid_test_time's
                                 time of its last request; with none, when the layer saw it) */
} braid_ddp_bucket_info_t;

BRAID_API int braid_ddp_num_buckets(braid_ddp_t ddp);
BRAID_API braid_result_t braid_ddp_bucket_info(braid_ddp_t ddp, int b,
                                               braid_ddp_bucket_info_t *info_p);
/** Bucket holding parameter i and its element offset in it; -1 if i is out of range. */
BRAID_API int braid_ddp_param_bucket(braid_ddp_t ddp, int i, size_t *offset_p);

/** A rank's shard of a bucket under ZeRO stage 1. */
typedef struct {
    void *grad;             /**< the reduced gradients of the shard (inside the bucket) */
    void *param;            /**< the shard's parameters (a flat copy the layer keeps) */
    size_t count;           /**< elements in the shard (0 for ranks past the bucket's end) */
    size_t offset;          /**< first element of the shard in the bucket */
    braid_datatype_t dtype; /**< element type */
} braid_ddp_shard_t;

/**
 * ZeRO stage 1 (zero_stage = 1, in the manner of DeepSpeed's): each bucket's gradients are
 * reduce-scattered (braid_ireduce_scatter, launched as the bucket fills, in bucket order), so
 * after braid_ddp_finish rank r holds the reduced gradients of the r-th of nranks equal shards
 * of every bucket (the bucket padded with zeros to a multiple of nranks). The caller's
 * optimizer updates only those shards (its state sized to them: 1/nranks of plain DDP's), in
 * shard->param, then calls braid_ddp_gather_params, which all-gathers every bucket's
 * parameters and copies them into the registered parameter buffers. Gradients outside the
 * shard are not reduced (their buffers hold this rank's own gradients). No hook.
 */
BRAID_API braid_result_t braid_ddp_shard(braid_ddp_t ddp, int b, braid_ddp_shard_t *shard_p);
/** ZeRO stage 1 or 2: all-gathers the updated shards (collective) into every parameter buffer. */
BRAID_API braid_result_t braid_ddp_gather_params(braid_ddp_t ddp);

/**
 * ZeRO stage 2 (zero_stage = 2): as stage 1 (braid_ddp_shard, braid_ddp_gather_params), but the
 * layer keeps gradients only for the shards this rank owns (shard->grad, 1/nranks of the
 * buckets plus padding). A bucket's full gradients live in a staging buffer only while the
 * bucket fills and its reduce-scatter (started as it fills, in bucket order, overlapping the
 * rest of backward) is in flight. With S = staging_buffers, bucket b uses buffer b % S, whose
 * size is the largest (padded) bucket among b % S, b % S + S, ...: in bucket order at most S
 * buckets hold staging memory, and a model with one large bucket pays for it once, not S
 * times. Before writing parameter i's gradient in a step, call braid_ddp_grad_buffer: it gives
 * the address to write (zeroed when the bucket took its buffer; valid until its bucket's
 * reduce-scatter starts, at the latest braid_ddp_finish) and, when bucket b - S still holds
 * the buffer, waits for its reduce-scatter to finish. Once parameter i's bucket has been
 * launched in this step (all its gradients ready) braid_ddp_grad_buffer(i) returns
 * BRAID_ERR_INVALID_USAGE naming the parameter (the layer stays usable): the full gradients
 * are then being reduce-scattered or gone, and the reduced ones exist only as the owned
 * shard (braid_ddp_shard after finish); read a gradient back (say for its norm) before
 * braid_ddp_grad_ready. Out of memory fails the layer (and aborts, see grad_ready). If
 * the holder has not been launched yet (gradients produced out of bucket order, or all taken
 * before any is ready) an extra buffer of this bucket's size is allocated instead (kept for
 * later steps; braid_ddp_stats reports every allocated buffer, the high-water mark). Buffers
 * are allocated at first use. Without grad_as_bucket_view, grad_ready copies the registered
 * gradient buffer into the staging buffer itself (the registered buffers are then the
 * caller's full-size gradients). no_sync is not supported (gradient accumulation would need
 * the full gradients): BRAID_ERR_INVALID_USAGE. No hook.
 * For plain DDP and stage 1 braid_ddp_grad_buffer gives braid_ddp_grad(ddp, i).
 */
BRAID_API braid_result_t braid_ddp_grad_buffer(braid_ddp_t ddp, int i, void **grad_p);

/** Memory and traffic of the layer on this rank. */
typedef struct {
    size_t grad_bytes;    /**< gradient memory held across steps: every bucket (plain DDP, ZeRO-1);
                               the owned shards (ZeRO-2) */
    size_t staging_bytes; /**< ZeRO-2: staging buffers allocated (high-water mark; each rounded
                               up to 64 bytes), else 0 */
    size_t param_copy_bytes; /**< ZeRO-1/2: the flat parameter copy all-gathered, else 0 */
    size_t shard_count;      /**< ZeRO: elements this rank owns (the optimizer state needed,
                                  per state tensor); plain DDP: every parameter's count */
    size_t padded_count;     /**< every bucket's count padded to a multiple of nranks (ZeRO) */
    unsigned long long sent_bytes; /**< since creation: bytes this rank sends in the layer's own
        collectives with a bandwidth-optimal (ring) algorithm: 2(n-1)/n * S for an all-reduce of
        S bytes (the default hook), (n-1)/n * S for the ZeRO reduce-scatter and all-gather of a
        padded bucket of S bytes. A custom hook's collectives are not counted */
    unsigned long long steps;      /**< finish calls that reduced (no_sync ones excluded) */
} braid_ddp_stats_t;

BRAID_API braid_result_t braid_ddp_stats(braid_ddp_t ddp, braid_ddp_stats_t *stats_p);

/**
 * Gradient compression hook (fills *hook_p; pass it in braid_ddp_options_t.hook): float32
 * buckets are cast to wire_dtype (BRAID_FLOAT16 or BRAID_BFLOAT16, round to nearest even),
 * all-reduced in it (braid reduces both in float32 and rounds once per step), and cast back.
 * With BRAID_AVG each gradient is multiplied by 1/n in float32 before the cast and the
 * quotients are summed (as torch's fp16_compress_hook), so only the average, not the sum,
 * must fit the wire type. Half the bytes per step; float16 saturates to infinity from 65520
 * and flushes below 2^-24 (scale the loss if gradients can be that large or small). Buckets
 * of other dtypes go uncompressed. Free with braid_ddp_hook_compress_free after
 * braid_ddp_destroy.
 */
BRAID_API braid_result_t braid_ddp_hook_compress(braid_ddp_hook_t *hook_p,
                                                 braid_datatype_t wire_dtype);
BRAID_API void braid_ddp_hook_compress_free(braid_ddp_hook_t *hook);
/** The conversions the hook uses: float32 -> float16/bfloat16 (round to nearest even, NaN
 * kept quiet) and back (exact); BRAID_ERR_UNSUPPORTED for other pairs. */
BRAID_API braid_result_t braid_ddp_cast(const void *in, braid_datatype_t in_dtype, void *out,
                                        braid_datatype_t out_dtype, size_t count);

/** PowerSGD options; fill with braid_ddp_powersgd_options_init() first. */
typedef struct {
    int rank;                    /**< approximation rank r (default 2) */
    double min_compression_rate; /**< a rows x cols matrix is compressed only if rows * cols >=
                                      this * (rows + cols) * r (default 2) */
    int error_feedback;          /**< keep what the approximation dropped, add it next step (1) */
    int warm_start;              /**< reuse last step's Q (1); 0: a fresh random Q every step */
    int start_iter;              /**< steps all-reduced uncompressed before compressing (0) */
    uint64_t seed;               /**< of the initial Q (0) */
} braid_ddp_powersgd_options_t;

BRAID_API void braid_ddp_powersgd_options_init(braid_ddp_powersgd_options_t *opts);

/**
 * PowerSGD gradient compression hook (Vogels et al. 2019, as PyTorch's powerSGD_hook; fills
 * *hook_p, pass it in braid_ddp_options_t.hook). Parameters registered with rows > 1 (a rows x
 * cols row-major matrix, cols = count / rows) whose size passes min_compression_rate are sent
 * as a rank-r factorisation; vectors and small matrices are all-reduced raw in the same
 * all-reduce as the first factor. Per float32 bucket and step, for each compressed M:
 *   M = grad + error;  P = M Q;  all-reduce P (sum);  orthonormalise P's columns (Gram-Schmidt);
 *   Q = M^T P;  all-reduce Q (sum, / n for BRAID_AVG);  grad = P Q^T;  error = M - P Q^T.
 * Bytes per step: (rows + cols) * r * 4 per compressed matrix instead of rows * cols * 4.
 * Q starts (and without warm_start restarts each step t, seed + t * 0xD1B54A32D192ED03) as
 * Q[k][j] = braid_ddp_powersgd_q0(seed, param index, k, j, r), the same on every rank; with
 * warm_start a column of Q whose norm fell below 2^-64 (zero: e.g. the gradient was zero on
 * every rank) restarts from that formula, since P = M Q would stay zero from then on. The P
 * all-reduce (with the raw gradients) starts when the bucket is ready (launch()); the
 * orthonormalisation, Q = M^T P and the Q all-reduce in next(), when the layer launches the next
 * bucket (or in finish for the last), so they overlap the rest of backward; P Q^T and the error
 * feedback in complete(), as soon as the Q all-reduce is seen done. Buckets of other dtypes, and
 * every bucket in the first start_iter steps, are all-reduced uncompressed. State: an error buffer
 * per compressed matrix (its size), Q, and the wire buffers. Free with
 * braid_ddp_hook_powersgd_free after braid_ddp_destroy.
 */
BRAID_API braid_result_t braid_ddp_hook_powersgd(braid_ddp_hook_t *hook_p,
                                                 const braid_ddp_powersgd_options_t *opts);
BRAID_API void braid_ddp_hook_powersgd_free(braid_ddp_hook_t *hook);
/** The initial Q's entry (k, j) of parameter param, in [-1, 1): splitmix64 of seed + (param <<
 * 40) + k * r + j, its top 53 bits scaled. */
BRAID_API double braid_ddp_powersgd_q0(uint64_t seed, int param, size_t k, size_t j, size_t r);

typedef struct {
    unsigned long long sent_bytes;  /**< since creation: bytes this rank sent in the hook's
                                         all-reduces with a ring algorithm (2(n-1)/n * S) */
    unsigned long long dense_bytes; /**< the same for the default all-reduce of the buckets */
    unsigned long long steps;       /**< steps seen (launches of bucket 0) */
    int compressed_params;          /**< matrices sent compressed */
    size_t state_bytes;             /**< error buffers, Q's and wire buffers */
} braid_ddp_powersgd_stats_t;

BRAID_API braid_result_t braid_ddp_powersgd_stats(const braid_ddp_hook_t *hook,
                                                  braid_ddp_powersgd_stats_t *stats_p);
/** The error-feedback buffer of parameter param (count floats: M - P Q^T of the last step), or
 * NULL if it is not compressed (or before the first step). */
BRAID_API const float *braid_ddp_powersgd_error(const braid_ddp_hook_t *hook, int param);

/**
 * Local SGD (periodic model averaging; src/ddp/localsgd.c): every rank steps its optimizer on
 * its own gradients (run the layer with braid_ddp_no_sync(ddp, 1), or without a layer), and
 * every period-th call of braid_ddp_localsgd_step all-reduces the buffers with BRAID_AVG in
 * place: the nbufs buffers (the parameters, and if chosen the optimizer state: momentum, Adam's
 * moments). Collective: every rank registers the same counts and dtypes and period (else
 * BRAID_ERR_MISMATCH on every rank); the buffers are not broadcast (create the DDP layer first,
 * which broadcasts the parameters). With period 1 and SGD (with or without momentum) it follows
 * plain DDP up to float rounding: the average of p - lr * g_r is p - lr * avg(g_r).
 * buf->grad is unused.
 */
typedef struct braid_ddp_localsgd *braid_ddp_localsgd_t;
BRAID_API braid_result_t braid_ddp_localsgd_create(braid_ddp_localsgd_t *ls_p, braid_comm_t comm,
                                                   const braid_ddp_param_t *bufs, int nbufs,
                                                   int period);
/** Counts one local step; on every period-th (since the last average) averages the buffers.
 * *averaged_p (may be NULL) says whether it did. */
BRAID_API braid_result_t braid_ddp_localsgd_step(braid_ddp_localsgd_t ls, int *averaged_p);
/** Averages now if any step was taken since the last average (e.g. at the end of an epoch, so
 * that every rank evaluates the same model); restarts the period. */
BRAID_API braid_result_t braid_ddp_localsgd_sync(braid_ddp_localsgd_t ls);
/** Bytes of buffers this rank handed to all-reduces so far, and the averages done. */
BRAID_API size_t braid_ddp_localsgd_bytes(braid_ddp_localsgd_t ls, long *averages_p);
BRAID_API void braid_ddp_localsgd_destroy(braid_ddp_localsgd_t ls);

/**
 * Asynchronous data parallelism with parameter servers (src/ddp/ps.c). The last nservers
 * ranks of comm are servers, the others workers. The registered parameters (one dtype), taken
 * back to back as one flat vector, are cut into nservers contiguous shards; server s holds
 * shard s and applies every gradient pushed to it with the caller's update function (the
 * optimizer) as soon as it arrives, counting its updates (the shard's version). Workers never
 * wait for each other: a worker's braid_ps_push_pull sends its gradients (params[i].grad) to
 * every server, then asks the servers one after the other (0, 1, ...) for their current shards
 * and receives them into params[i].param, with the version of each. Point-to-point messages
 * only (braid_isend/braid_irecv), no collective while workers train.
 *
 * Bounded staleness B. The staleness of an applied gradient is the number of updates the
 * server applied between the version the worker read and this one. A server answers a request
 * for parameters only when that cannot let any worker's gradient become more than B updates
 * stale: with C the workers that read the shard and have not pushed since, it answers when, for
 * every w in C, (updates since w read) + |C| <= B (so also |C| <= B). Otherwise the asking
 * worker waits (a slow worker makes fast ones wait only when they get B updates ahead of it;
 * B >= 2 * (workers - 1) never makes equally fast workers wait). Asking the servers in one
 * order keeps several servers from waiting on each other. Every server records the staleness
 * of every gradient it applies (braid_ps_stats).
 *
 * Faults. Every wait has the communicator's timeout (braid_comm_get_timeout): a server waiting
 * on a worker that stays silent, a dead worker or server, give an error naming that rank (and
 * the failing rank aborts the communicator, so the others fail too instead of waiting). With
 * nservers > 1 a server allows a worker 2 * nservers timeouts of silence where another
 * server's bound may be holding it (after this server's reply, except at the last server;
 * after its push, except at server 0; see ps.c), so a held worker is not blamed for the one
 * that holds it.
 * Shutdown: each worker calls braid_ps_done (tells every server); braid_ps_serve returns when
 * every worker is done; then braid_ps_gather (collective) gives every rank the final
 * parameters.
 */
typedef struct braid_ps *braid_ps_t;
/** The server's optimizer: applies grad to param, count elements of the registered dtype at
 * element offset of the flat vector; version = this update's number on the shard (1, 2, ...).
 * A non-zero return stops the server with that error. */
typedef braid_result_t (*braid_ps_update_fn)(void *state, void *param, const void *grad,
                                             size_t offset, size_t count, long version);
typedef struct {
    int nservers;              /**< the last nservers ranks serve (1 <= nservers < nranks); 1 */
    int staleness;             /**< B >= 0; 16 */
    braid_ps_update_fn update; /**< required */
    void *update_state;
} braid_ps_options_t;
BRAID_API void braid_ps_options_init(braid_ps_options_t *opts);
/** Collective over comm: checks that every rank registered the same list and options
 * (BRAID_ERR_MISMATCH), broadcasts the parameters from rank 0, servers copy their shard. */
BRAID_API braid_result_t braid_ps_create(braid_ps_t *ps_p, braid_comm_t comm,
                                         const braid_ddp_param_t *params, int nparams,
                                         const braid_ps_options_t *opts);
/** 1 on server ranks, 0 on workers. */
BRAID_API int braid_ps_is_server(braid_ps_t ps);
/** Server: serves until every worker called braid_ps_done, or the first error. */
BRAID_API braid_result_t braid_ps_serve(braid_ps_t ps);
/** Worker: the first call only pulls (the starting parameters); later ones push the
 * gradients, then pull. */
BRAID_API braid_result_t braid_ps_push_pull(braid_ps_t ps);
/** Worker: tells every server it is done (no more pushes). */
BRAID_API braid_result_t braid_ps_done(braid_ps_t ps);
/** Collective, after serve/done everywhere: every rank's parameters become the servers'. */
BRAID_API braid_result_t braid_ps_gather(braid_ps_t ps);
typedef struct {
    long pushes;                   /**< worker: gradients pushed; server: gradients applied */
    long max_staleness;            /**< server: largest staleness applied (-1 if none) */
    long hist[8];                  /**< server: applied with staleness 0..6, and >= 7 */
    long deferred;                 /**< server: requests that had to wait for the bound */
    double wait_s;                 /**< worker: time spent waiting for parameters */
    size_t sent_bytes, recv_bytes; /**< this rank's point-to-point payload, headers included */
    size_t buffer_bytes; /**< memory the parameter server holds on this rank from create to
                          *   destroy: server: its parameter shard and a receive and a send
                          *   buffer per worker; worker: a push and a reply buffer per server
                          *   (the caller's parameters, gradients and optimizer state are not
                          *   counted) */
} braid_ps_stats_t;
BRAID_API braid_result_t braid_ps_stats(braid_ps_t ps, braid_ps_stats_t *st);
BRAID_API void braid_ps_destroy(braid_ps_t ps);

/** The calling thread's message for its last failed braid_ddp call ("" if none). Errors of
 * the communicator carry braid_last_error()'s text. */
BRAID_API const char *braid_ddp_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* BRAID_DDP_H */
