/**
 * @file nccl.h
 * @brief braid's NCCL-compatible API: the header of braid's libnccl.so.2 drop-in.
 *
 * Written for braid from NCCL's public documentation: the types, enum values and struct
 * layouts are NCCL 2.26's, so a program compiled against this header (or NCCL's 2.26 header)
 * runs on braid by linking braid's libnccl.so.2 instead of NVIDIA's. Every function returns an
 * ncclResult_t; ncclGetLastError() gives the message that names the cause (the bad argument,
 * the peer that died). See the README section "NCCL drop-in" for what differs from NCCL.
 *
 * Buffers: host pointers are a braid extension (NCCL takes device pointers only); a call on
 * host buffers has completed when it returns, whatever the stream. Device buffers take braid's
 * GPU path when braid was built with one, else the call fails with ncclInvalidUsage.
 *
 * CUDA headers: like NCCL's, this header includes cuda_runtime.h (and cuda_fp16.h,
 * cuda_bf16.h, cuda_fp8.h in C++) when the compiler can find it. Where it cannot (a host-only
 * program built with plain cc), or when NCCL_BRAID_NO_CUDA_HEADERS is defined, it declares
 * cudaStream_t itself, with CUDA's own definition (struct CUstream_st *), so code that
 * includes cuda_runtime.h later still compiles.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if !defined(NCCL_BRAID_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define NCCL_BRAID_CUDA_HEADERS 1
#endif
#endif

#ifdef NCCL_BRAID_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
/** A CUDA stream (CUDA's definition, for programs built without the CUDA headers). */
typedef struct CUstream_st *cudaStream_t;
#endif

/** The NCCL version whose API this library implements. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 26
#define NCCL_PATCH 6
#define NCCL_SUFFIX "braid"
/** NCCL's version formula: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after. */
#define NCCL_VERSION(X, Y, Z)                                                                      \
    (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE 22606
/** Defined by braid's nccl.h (NCCL's own does not define it). */
#define NCCL_BRAID 1

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator (opaque). */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/** Bootstrap handle made by ncclGetUniqueId on one rank and passed to all. */
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/** Result codes (NCCL's values). */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/**
 * Communicator options (NCCL 2.26's layout). Initialise with NCCL_CONFIG_INITIALIZER.
 * braid honours blocking (0 = ncclCommInitRankConfig returns ncclInProgress and the init
 * runs in the background); the other fields are checked as NCCL 2.26 checks them (an invalid
 * one is ncclInvalidArgument) and have no effect (the number of channels comes from
 * NCCL_NCHANNELS / NCCL_MAX_NCHANNELS or BRAID_NCHANNELS, for every communicator of the
 * process).
 */
typedef struct ncclConfig_v21700 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
            NCCL_CONFIG_UNDEF_INT                                                                  \
    }

/** Output of ncclGroupSimulateEnd (braid leaves estimatedTime unchanged: it has no cost
 * model). */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                                  \
    {                                                                                              \
        sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),       \
            NCCL_UNDEF_FLOAT                                                                       \
    }

/** Reduction operations (NCCL's values). Values from ncclNumOps up are created ops. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/** Element types (NCCL's values; note float32 = 7 and bfloat16 = 9). */
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/** Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
    ncclScalarDevice = 0,       /**< device memory, read during each collective */
    ncclScalarHostImmediate = 1 /**< host memory, read before ncclRedOpCreatePreMulSum returns */
} ncclScalarResidence_t;

/* Every function also exists with a "p" prefix (pncclAllReduce ...), as in NCCL. */

/** Allocates size bytes for communication buffers: device memory of the current device where
 * braid sees a CUDA device (as NCCL), else page-aligned host memory (braid's extension). Free
 * with ncclMemFree. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/** NCCL_VERSION_CODE of the linked library. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/** Creates an id on one rank (it starts the bootstrap root in this process). With
 * NCCL_COMM_ID=host:port set, every rank gets the same id and rank 0's init opens the root
 * on that address. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/** Creates a communicator; collective over the nranks ranks. Inside ncclGroupStart/End the
 * inits of one thread run together at ncclGroupEnd (one thread may init several ranks). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
/** ndev communicators of one process (ranks 0..ndev-1); devlist is recorded, may be NULL. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/** As ncclCommInitRankConfig; the ids after the first are not needed by braid. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);
/** Completes outstanding work (host calls have completed already). */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
/** Aborts what runs on comm (peers see an error) and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
/** Collective over comm: ranks with one color form a new communicator ordered by key;
 * NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);

const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);
/** The message of the last failure on comm, or of the calling thread when comm is NULL. */
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);
/** Accepted; braid reads its logging settings once per process. */
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);

/** The communicator's asynchronous error: ncclInProgress while a non-blocking init runs. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);
/** The CUDA device current when the communicator was created (0 without CUDA). */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);
/** Registers a buffer with comm (braid_comm_register); deregister before freeing it. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/** A sum that first multiplies every input by *scalar (one element of datatype), valid on
 * comm with datatype only. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Collectives: sendbuff == recvbuff is in place. recvbuff of ncclReduce and sendbuff of
 * ncclBroadcast are only read on the root. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
/** In-place broadcast (deprecated in NCCL). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
/** recvcount per rank; in place when recvbuff == sendbuff + rank*recvcount. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
/** sendcount per rank; in place when sendbuff == recvbuff + rank*sendcount. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/** braid extensions with NCCL 2.28's signatures: count elements per peer. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/** Point-to-point: the peer posts the matching ncclRecv/ncclSend (same count and type).
 * Several of them must be inside one ncclGroupStart/End to progress together. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/** Groups (per thread, nestable): calls between the outermost ncclGroupStart and its
 * ncclGroupEnd run as one batch at ncclGroupEnd; errors of the batch are returned there. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
/** Ends the outermost group as NCCL 2.26 simulates it: simInfo NULL is ncclGroupEnd; a simInfo
 * without NCCL_SIM_INFO_INITIALIZER's magic fails the group (ncclInvalidArgument); a group of
 * non-blocking communicators runs as at ncclGroupEnd. Otherwise the group's inits and splits
 * run and none of its operations does: ncclSuccess when it holds no collective, else
 * ncclInvalidUsage (braid cannot estimate a collective). estimatedTime is left unchanged. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
