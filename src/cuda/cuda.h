/* What braid's C code knows about CUDA: this interface needs no CUDA header. With CUDA built
 * (BRAID_HAVE_CUDA) device.c and stream.c implement it over the static CUDA runtime; without,
 * nocuda.c answers "built without CUDA" (no device, every pointer is host memory).
 *
 * Device detection: the first call that needs it asks the runtime for the device count once
 * per process (cudaGetDeviceCount; no driver, no GPU, the stub libcuda or BRAID_CUDA=0 all
 * mean 0 devices). With 0 devices nothing else ever calls CUDA: classifying a pointer is one
 * load of a cached int. With devices, each collective classifies its buffers with
 * cudaPointerGetAttributes (see braid_cuda_ptr_device). */
#ifndef BRAID_CUDA_CUDA_H
#define BRAID_CUDA_CUDA_H

#include "braid/braid.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct braid_comm;
struct braid_op_args;

/* 1 when this library was built with CUDA. */
int braid_cuda_built(void);
/* CUDA devices this process sees (cached); 0 when none, and then *why_p (if given) says why
 * ("built without CUDA", "no CUDA driver (cudaErrorInsufficientDriver)", ...). */
int braid_cuda_ndevices(const char **why_p);
/* The calling thread's current device, or -1 without devices. */
int braid_cuda_current_device(void);

/* Where p lives: -1 for host memory (pageable, pinned, or unknown to CUDA), else the ordinal
 * of the device whose memory it is (cudaMalloc'ed or managed memory). NULL is host. */
int braid_cuda_ptr_device(const void *p);
/* Where braid has no device (built without CUDA, BRAID_CUDA=0, none visible): looks for the
 * CUDA driver library already loaded by the program (drvptr.c; at communicator init), and
 * then braid_cuda_drv_ptr_device asks it where p lives (-1: host, or no driver loaded), so a
 * device buffer is refused with a message rather than read as host memory. */
void braid_cuda_drv_probe(void);
int braid_cuda_drv_ptr_device(const void *p);
/* Tests only: classify pointers with fn instead of the runtime (NULL restores the runtime).
 * This is how the argument checks for device buffers are tested on machines without a GPU. */
void braid_cuda_test_set_classifier(int (*fn)(const void *p));
/* Whether the device engine runs collective a (its reduction kernels need element-aligned
 * buffers) on comm: 1 when it will, or when the comm's first device collective has not yet made
 * the engine's collective setup and nothing known without it rules the engine out; 0 when the
 * call is staged through the host (built without CUDA, no engine state, BRAID_DEV_ENGINE=stage,
 * PreMulSum, float8, a barrier, or the setup found the engine unavailable). Which of the two
 * runs the call is still decided alike on every rank (executor.c); this answers for this
 * rank's argument check (executor.c, nocuda.c). */
int braid_cuda_engine_will_run(struct braid_comm *comm, const struct braid_op_args *a);
/* Tests only: the argument check takes v (0 or 1) as braid_cuda_engine_will_run's answer; -1
 * restores it (coll_dev.c). */
void braid_cuda_test_set_engine_runs(int v);
/* Tests: the probe acts as if NVIDIA's device nodes existed (where it sets
 * CUDA_DEVICE_MAX_CONNECTIONS); call before the first CUDA probe of the process. */
void braid_cuda_test_set_driver_present(int yes);

/* Waits until stream (a cudaStream_t) has no pending work, polling cudaStreamQuery: never
 * unbounded. BRAID_ERR_TIMEOUT after timeout_s, BRAID_ERR_ABORTED once *aborted (NULL: not
 * checked) is set, BRAID_ERR_SYSTEM for a failed stream; what names the wait in the message. */
braid_result_t braid_cuda_stream_drain(void *stream, double timeout_s, _Atomic int *aborted,
                                       const char *what);
/* Makes dev the calling thread's current device (CUDA build only): *prev_p gets the device
 * that was current (-1: none known), which braid_cuda_device_restore puts back. A thread
 * may drive communicators of several devices; braid never leaves its device switched. */
braid_result_t braid_cuda_device_enter(int dev, int *prev_p);
void braid_cuda_device_restore(int prev, int dev);

/* Copies bytes between any two pointers (cudaMemcpyDefault) on stream (a cudaStream_t made
 * with cudaStreamNonBlocking: never the legacy default stream, which waits for every blocking
 * stream, a user stream held by a stream-ordered call included) and waits for the copy. */
braid_result_t braid_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream);
/* Copies bytes between host and comm's device memory on its staging stream (created on first
 * use) and waits for the copy: the staged sends, receives and p2p collectives (p2p_dev.c). */
braid_result_t braid_cuda_comm_copy(struct braid_comm *comm, void *dst, const void *src,
                                    size_t bytes);
/* cudaMalloc / cudaFree on the current device (braid_cuda_mem_alloc's work). */
braid_result_t braid_cuda_dev_alloc(void **p_p, size_t bytes);
braid_result_t braid_cuda_dev_free(void *p);
/* Page-locked host memory for staging (cudaMallocHost); free with braid_cuda_host_free. */
braid_result_t braid_cuda_host_alloc(void **p_p, size_t bytes);
void braid_cuda_host_free(void *p);

/* Per-communicator CUDA state (device, staging buffers, stream-ordered queue), created at init
 * when the process has a device. */
braid_result_t braid_cuda_comm_init(struct braid_comm *comm);
void braid_cuda_comm_free(struct braid_comm *comm);

/* A validated blocking collective whose buffers are device memory: runs it and returns when
 * the result is in place (stage.c: through pinned host buffers and the CPU engine). */
braid_result_t braid_cuda_run_blocking(struct braid_comm *comm, const struct braid_op_args *a);
/* A validated collective on device buffers that the worker will run (non-blocking, or queued
 * behind pending operations): the device engine's setup or the staging area's growth, done now
 * on the caller's thread (the worker must not allocate while a user stream may be held). */
braid_result_t braid_cuda_prepare_queued(struct braid_comm *comm, const struct braid_op_args *a);
/* braid_cuda_prepare_queued as the collective entries and group end call it (coll_dev.c).
 * Tests only: braid_cuda_test_set_prepare_hook(fn) makes fn run instead (NULL restores), so a
 * test sees on which thread, and for which calls, the preparation runs. */
braid_result_t braid_coll_prepare_dev(struct braid_comm *comm, const struct braid_op_args *a);
void braid_cuda_test_set_prepare_hook(braid_result_t (*fn)(struct braid_comm *comm,
                                                           const struct braid_op_args *a));
/* A validated stream-ordered collective on device buffers: enqueues it after the stream's
 * current work and returns at once; the stream's later work waits for it (stream.c). An error
 * means nothing was queued and the call took no number (the caller tells the peers: a stream
 * under graph capture, a failed prepare or event record). */
braid_result_t braid_cuda_enqueue(struct braid_comm *comm, const struct braid_op_args *a,
                                  void *stream);
/* Run by the comm's worker thread for a request made by braid_cuda_enqueue. */
braid_result_t braid_cuda_run_queued(struct braid_comm *comm, struct braid_request *req);
/* Waits (bounded by the comm's timeout, aborted by braid_comm_abort) until stream has no
 * pending work: the stream-ordered form with host buffers. */
braid_result_t braid_cuda_stream_wait(struct braid_comm *comm, void *stream);

/* The device engine's statistics on comm (executor.c): collectives it ran, kernel launches,
 * launches after which no lane had moved; zeros while it is not used, and then *why_p says
 * why ("not tried yet", "the ranks span several hosts", ...; NULL when it is used). */
void braid_cuda_engine_stats(struct braid_comm *comm, uint64_t *calls_p, uint64_t *launches_p,
                             uint64_t *idle_p, const char **why_p);

#endif
