/* Collectives, point-to-point, PreMulSum ops, ncclMemAlloc/Free and buffer registration.
 * Each call checks what is NCCL's to check (communicator, datatype, op, root or peer) and
 * hands the rest to braid, whose messages name the argument at fault. */
#include "shim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ncclDataType_t -> braid_datatype_t (the orders differ: NCCL has float32 = 7, bfloat16 = 9).
 * The float8 values are braid's BRAID_FLOAT8_E4M3/E5M2 (10, 11) where braid has them. */
static const int dtype_map[ncclNumTypes] = {
    BRAID_INT8,    BRAID_UINT8,   BRAID_INT32,   BRAID_UINT32,   BRAID_INT64, BRAID_UINT64,
    BRAID_FLOAT16, BRAID_FLOAT32, BRAID_FLOAT64, BRAID_BFLOAT16, 10,          11};
static const char *dtype_names[ncclNumTypes] = {"ncclInt8",     "ncclUint8",      "ncclInt32",
                                                "ncclUint32",   "ncclInt64",      "ncclUint64",
                                                "ncclFloat16",  "ncclFloat32",    "ncclFloat64",
                                                "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};

/* The argument checks write their message to msg (SHIM_MSG_BYTES) and return the NCCL code. */
static ncclResult_t map_dtype(const char *call, ncclDataType_t dt, braid_datatype_t *out, char *msg)
{
    if ((int)dt < 0 || (int)dt >= ncclNumTypes) {
        snprintf(msg, SHIM_MSG_BYTES, "%s: datatype=%d is not an ncclDataType_t", call, (int)dt);
        return ncclInvalidArgument;
    }
    braid_datatype_t b = (braid_datatype_t)dtype_map[dt];
    if (braid_dtype_size(b) == 0) {
        snprintf(msg, SHIM_MSG_BYTES, "%s: datatype %s is not supported by this braid build", call,
                 dtype_names[dt]);
        return ncclInvalidUsage;
    }
    *out = b;
    return ncclSuccess;
}

_Static_assert(SHIM_MAX_REDOPS == 256, "a created op's slot is its value's low 8 bits");

/* The comm->redops slot that a created op's value names (SHIM_OPTAG_MAX), or -1 with msg
 * (SHIM_MSG_BYTES) saying why not: not a created op's value at all, or one made on another
 * communicator (its tag is not comm's; NCCL 2.26's mangled values refuse it too). Neither looks
 * at the slot's state. */
static int op_slot(ncclComm_t comm, const char *call, ncclRedOp_t op, char *msg)
{
    long v = (long)op - ncclNumOps;
    unsigned long tag = v >= 0 ? (unsigned long)v / SHIM_MAX_REDOPS : 0;
    if (tag == comm->optag) return (int)(v % SHIM_MAX_REDOPS);
    if (tag >= 1 && tag <= SHIM_OPTAG_MAX)
        snprintf(msg, SHIM_MSG_BYTES,
                 "%s: op=%d was created on another communicator (an op created with "
                 "ncclRedOpCreatePreMulSum belongs to the communicator it was created on)",
                 call, (int)op);
    else
        snprintf(msg, SHIM_MSG_BYTES,
                 "%s: op=%d is neither a built-in ncclRedOp_t nor an op created on this "
                 "communicator",
                 call, (int)op);
    return -1;
}

static ncclResult_t map_op(ncclComm_t comm, const char *call, ncclRedOp_t op, ncclDataType_t dt,
                           braid_redop_t *out, int *premul, char *msg)
{
    static const braid_redop_t builtin[ncclNumOps] = {BRAID_SUM, BRAID_PROD, BRAID_MAX, BRAID_MIN,
                                                      BRAID_AVG};
    if ((int)op >= 0 && (int)op < ncclNumOps) {
        *out = builtin[op];
        return ncclSuccess;
    }
    int i = op_slot(comm, call, op, msg);
    if (i < 0) return ncclInvalidArgument;
    pthread_mutex_lock(&comm->lock);
    int ok = comm->redops[i].used == 1;
    int same_type = ok && comm->redops[i].dtype == dt;
    braid_redop_t b = comm->redops[i].op;
    pthread_mutex_unlock(&comm->lock);
    if (!ok) {
        snprintf(msg, SHIM_MSG_BYTES,
                 "%s: op=%d is not an op alive on this communicator (destroyed already)", call,
                 (int)op);
        return ncclInvalidArgument;
    }
    if (!same_type) {
        snprintf(msg, SHIM_MSG_BYTES, "%s: op=%d was created for another datatype than %s", call,
                 (int)op, (int)dt >= 0 && (int)dt < ncclNumTypes ? dtype_names[dt] : "this one");
        return ncclInvalidArgument;
    }
    *out = b;
    *premul = i + 1;
    return ncclSuccess;
}

void shim_redop_hold(const shim_op_t *o)
{
    if (!o->premul) return;
    pthread_mutex_lock(&o->comm->lock);
    o->comm->redops[o->premul - 1].holds++;
    o->comm->pins++;
    pthread_mutex_unlock(&o->comm->lock);
}

void shim_redop_release(const shim_op_t *o)
{
    if (!o->premul) return;
    ncclComm_t comm = o->comm;
    int i = o->premul - 1, gone = 0;
    pthread_mutex_lock(&comm->lock);
    braid_redop_t b = comm->redops[i].op;
    braid_comm_t bc = comm->bc; /* NULL once closed: braid's destroy took its ops */
    if (--comm->redops[i].holds == 0 && comm->redops[i].used == 3) {
        comm->redops[i].used = 0;
        gone = 1;
    }
    int last = --comm->pins == 0 && comm->retired; /* closed meanwhile: ours to free */
    pthread_mutex_unlock(&comm->lock);
    /* The destroy the program asked for (and was told succeeded): nobody to report to. */
    if (gone && bc) (void)braid_redop_destroy(b, bc);
    if (last) shim_comm_free(comm);
}

static ncclResult_t ready(ncclComm_t comm, const char *call)
{
    ncclResult_t res = shim_ready(comm, call);
    return res == ncclSuccess ? res : shim_group_fail(res);
}

/* The checks every collective shares, then submission. A call that fails them still goes to
 * braid, with a datatype or op braid refuses too (shim_reject): it takes its place in the
 * communicator's call order and the peers' call of that number fails naming it, instead of
 * waiting for it or pairing with this rank's next call. */
static ncclResult_t coll_entered(shim_kind_t kind, const char *call, const void *sendbuf,
                                 void *recvbuf, size_t count, ncclDataType_t dt, int reduces,
                                 ncclRedOp_t op, int rooted, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    ncclResult_t res = ready(comm, call);
    if (res != ncclSuccess) return res;
    shim_op_t o = {.kind = kind,
                   .name = call,
                   .comm = comm,
                   .sendbuf = sendbuf,
                   .recvbuf = recvbuf,
                   .count = count,
                   .dtype = (braid_datatype_t)-1,
                   .op = (braid_redop_t)-1,
                   .root = root,
                   .stream = stream};
    char msg[SHIM_MSG_BYTES];
    res = map_dtype(call, dt, &o.dtype, msg);
    if (res == ncclSuccess && reduces) res = map_op(comm, call, op, dt, &o.op, &o.premul, msg);
    if (res == ncclSuccess && rooted && (root < 0 || root >= comm->nranks)) {
        snprintf(msg, sizeof(msg), "%s: %s=%d is outside [0, nranks=%d)", call,
                 kind == SHIM_SEND || kind == SHIM_RECV ? "peer" : "root", root, comm->nranks);
        res = ncclInvalidArgument;
    }
    /* The value at fault stays in o (a bad datatype or op as -1): braid refuses it too. */
    if (res != ncclSuccess) return shim_reject(&o, res, msg);
    return shim_submit(&o);
}

static ncclResult_t coll(shim_kind_t kind, const char *call, const void *sendbuf, void *recvbuf,
                         size_t count, ncclDataType_t dt, int reduces, ncclRedOp_t op, int rooted,
                         int root, ncclComm_t comm, cudaStream_t stream)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, call);
    if (res != ncclSuccess) return shim_group_fail(res);
    res = coll_entered(kind, call, sendbuf, recvbuf, count, dt, reduces, op, rooted, root, comm,
                       stream);
    shim_leave(comm);
    return res;
}

braid_result_t shim_op_issue(const shim_op_t *o)
{
    braid_comm_t bc = o->comm->bc;
    switch (o->kind) {
    case SHIM_ALLREDUCE:
        return braid_allreduce(o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, bc);
    case SHIM_BROADCAST:
        return braid_broadcast(o->sendbuf, o->recvbuf, o->count, o->dtype, o->root, bc);
    case SHIM_REDUCE:
        return braid_reduce(o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, o->root, bc);
    case SHIM_REDUCE_SCATTER:
        return braid_reduce_scatter(o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, bc);
    case SHIM_ALLGATHER:
        return braid_allgather(o->sendbuf, o->recvbuf, o->count, o->dtype, bc);
    case SHIM_ALLTOALL:
        return braid_alltoall(o->sendbuf, o->recvbuf, o->count, o->dtype, bc);
    case SHIM_GATHER:
        return braid_gather(o->sendbuf, o->recvbuf, o->count, o->dtype, o->root, bc);
    case SHIM_SCATTER:
        return braid_scatter(o->sendbuf, o->recvbuf, o->count, o->dtype, o->root, bc);
    case SHIM_SEND:
        return braid_send(o->sendbuf, o->count, o->dtype, o->root, bc);
    case SHIM_RECV:
        return braid_recv(o->recvbuf, o->count, o->dtype, o->root, bc);
    }
    return BRAID_ERR_INTERNAL; /* every kind is handled above */
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    return coll(SHIM_ALLREDUCE, "ncclAllReduce", sendbuff, recvbuff, count, datatype, 1, op, 0, -1,
                comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return coll(SHIM_BROADCAST, "ncclBroadcast", sendbuff, recvbuff, count, datatype, 0, ncclSum, 1,
                root, comm, stream);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    return coll(SHIM_BROADCAST, "ncclBcast", buff, buff, count, datatype, 0, ncclSum, 1, root, comm,
                stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    return coll(SHIM_REDUCE, "ncclReduce", sendbuff, recvbuff, count, datatype, 1, op, 1, root,
                comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    return coll(SHIM_REDUCE_SCATTER, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype,
                1, op, 0, -1, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return coll(SHIM_ALLGATHER, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, 0,
                ncclSum, 0, -1, comm, stream);
}

/* Point-to-point and the collectives built on it (peer range checked as root). */
static ncclResult_t p2p(shim_kind_t kind, const char *call, const void *sendbuf, void *recvbuf,
                        size_t count, ncclDataType_t dt, int rooted, int root, ncclComm_t comm,
                        cudaStream_t stream)
{
    return coll(kind, call, sendbuf, recvbuf, count, dt, 0, ncclSum, rooted, root, comm, stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return p2p(SHIM_SEND, "ncclSend", sendbuff, NULL, count, datatype, 1, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return p2p(SHIM_RECV, "ncclRecv", NULL, recvbuff, count, datatype, 1, peer, comm, stream);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    return p2p(SHIM_ALLTOALL, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, 0, -1, comm,
               stream);
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    return p2p(SHIM_GATHER, "ncclGather", sendbuff, recvbuff, count, datatype, 1, root, comm,
               stream);
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    return p2p(SHIM_SCATTER, "ncclScatter", sendbuff, recvbuff, count, datatype, 1, root, comm,
               stream);
}

/* ---- PreMulSum ------------------------------------------------------------------------------ */
static ncclResult_t premulsum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                              ncclScalarResidence_t residence, ncclComm_t comm)
{
    static const char *call = "ncclRedOpCreatePreMulSum";
    ncclResult_t res = shim_ready(comm, call);
    if (res != ncclSuccess) return res;
    if (!op) return shim_fail(comm, ncclInvalidArgument, "%s: op is NULL", call);
    if (!scalar) return shim_fail(comm, ncclInvalidArgument, "%s: scalar is NULL", call);
    if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
        return shim_fail(comm, ncclInvalidArgument, "%s: residence=%d", call, (int)residence);
    braid_datatype_t bdt;
    char msg[SHIM_MSG_BYTES];
    if ((res = map_dtype(call, datatype, &bdt, msg)) != ncclSuccess)
        return shim_fail(comm, res, "%s", msg);
    if (residence == ncclScalarDevice)
        return shim_fail(comm, ncclInvalidUsage,
                         "%s: ncclScalarDevice is not supported (braid reads the scalar at "
                         "creation: pass a host scalar with ncclScalarHostImmediate)",
                         call);
    pthread_mutex_lock(&comm->lock);
    int slot = -1;
    for (int i = 0; i < SHIM_MAX_REDOPS && slot < 0; i++)
        if (!comm->redops[i].used) slot = i;
    if (slot >= 0) comm->redops[slot].used = 2; /* reserved */
    pthread_mutex_unlock(&comm->lock);
    if (slot < 0)
        return shim_fail(comm, ncclInvalidUsage, "%s: %d created ops are alive already", call,
                         SHIM_MAX_REDOPS);
    braid_redop_t b;
    braid_result_t r = braid_redop_create_premulsum(&b, scalar, bdt, comm->bc);
    pthread_mutex_lock(&comm->lock);
    if (r == BRAID_SUCCESS) {
        comm->redops[slot].used = 1;
        comm->redops[slot].op = b;
        comm->redops[slot].dtype = datatype;
    } else {
        comm->redops[slot].used = 0;
    }
    pthread_mutex_unlock(&comm->lock);
    if (r != BRAID_SUCCESS) return shim_braid_fail(comm, r, call);
    *op = (ncclRedOp_t)(ncclNumOps + (int)comm->optag * SHIM_MAX_REDOPS + slot);
    return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclRedOpCreatePreMulSum");
    if (res != ncclSuccess) return res;
    res = premulsum(op, scalar, datatype, residence, comm);
    shim_leave(comm);
    return res;
}

static ncclResult_t redop_destroy(ncclRedOp_t op, ncclComm_t comm)
{
    static const char *call = "ncclRedOpDestroy";
    ncclResult_t res = shim_ready(comm, call);
    if (res != ncclSuccess) return res;
    if ((int)op >= 0 && (int)op < ncclNumOps)
        return shim_fail(comm, ncclInvalidArgument, "%s: op=%d is a built-in op", call, (int)op);
    char msg[SHIM_MSG_BYTES];
    int i = op_slot(comm, call, op, msg);
    if (i < 0) return shim_fail(comm, ncclInvalidArgument, "%s", msg);
    pthread_mutex_lock(&comm->lock);
    int ok = comm->redops[i].used == 1;
    int held = ok && comm->redops[i].holds > 0;
    braid_redop_t b = ok ? comm->redops[i].op : BRAID_SUM;
    if (ok) comm->redops[i].used = held ? 3 : 0;
    pthread_mutex_unlock(&comm->lock);
    if (!ok)
        return shim_fail(comm, ncclInvalidArgument,
                         "%s: op=%d is not an op alive on this communicator (destroyed already)",
                         call, (int)op);
    if (held) return ncclSuccess; /* the group's end destroys it (shim_redop_release) */
    braid_result_t r = braid_redop_destroy(b, comm->bc);
    if (r != BRAID_SUCCESS) return shim_braid_fail(comm, r, call);
    return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclRedOpDestroy");
    if (res != ncclSuccess) return res;
    res = redop_destroy(op, comm);
    shim_leave(comm);
    return res;
}

/* ---- memory and registration ---------------------------------------------------------------- */
ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    shim_clear();
    if (!ptr || size == 0)
        return shim_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr=%p, size=%zu", (void *)ptr,
                         size);
    void *p = NULL;
    /* As NCCL: device memory where braid has a CUDA device (nccl-tests writes its buffers with
     * cudaMemset and kernels), else host memory (braid's extension, usable without a GPU). */
    if (braid_cuda_device_count() > 0) {
        braid_result_t r = braid_cuda_mem_alloc(&p, size);
        if (r != BRAID_SUCCESS)
            return shim_fail(NULL, r == BRAID_ERR_NOMEM ? ncclSystemError : ncclUnhandledCudaError,
                             "ncclMemAlloc: %s", braid_last_error());
        *ptr = p;
        return ncclSuccess;
    }
    size_t rounded = (size + 4095) & ~(size_t)4095;
    if (rounded < size || posix_memalign(&p, 4096, rounded))
        return shim_fail(NULL, ncclSystemError, "ncclMemAlloc: cannot allocate %zu bytes", size);
    memset(p, 0, rounded);
    *ptr = p;
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr)
{
    shim_clear();
    if (ptr && braid_cuda_device_count() > 0) {
        if (braid_cuda_mem_free(ptr) != BRAID_SUCCESS)
            return shim_fail(NULL, ncclInvalidArgument, "ncclMemFree: %s", braid_last_error());
        return ncclSuccess;
    }
    free(ptr);
    return ncclSuccess;
}

static ncclResult_t reg(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    ncclResult_t res = shim_ready(comm, "ncclCommRegister");
    if (res != ncclSuccess) return res;
    if (!handle) return shim_fail(comm, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
    braid_reg_t h;
    braid_result_t r = braid_comm_register(comm->bc, buff, size, &h);
    if (r != BRAID_SUCCESS) return shim_braid_fail(comm, r, "ncclCommRegister");
    *handle = h;
    return ncclSuccess;
}

static ncclResult_t dereg(const ncclComm_t comm, void *handle)
{
    ncclResult_t res = shim_ready(comm, "ncclCommDeregister");
    if (res != ncclSuccess || !handle) return res; /* NCCL: a NULL handle is nothing to do */
    braid_result_t r = braid_comm_deregister(comm->bc, (braid_reg_t)handle);
    /* braid refuses an unknown handle as an argument; NCCL's "could not find handle" is a
     * usage error. */
    if (r == BRAID_ERR_INVALID_ARG)
        return shim_fail(comm, ncclInvalidUsage, "ncclCommDeregister: %s", braid_last_error());
    if (r != BRAID_SUCCESS) return shim_braid_fail(comm, r, "ncclCommDeregister");
    return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclCommRegister");
    if (res != ncclSuccess) return res;
    res = reg(comm, buff, size, handle);
    shim_leave(comm);
    return res;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    shim_clear();
    ncclResult_t res = shim_enter(comm, "ncclCommDeregister");
    if (res != ncclSuccess) return res;
    res = dereg(comm, handle);
    shim_leave(comm);
    return res;
}

SHIM_PNAME(ncclAllReduce);
SHIM_PNAME(ncclBroadcast);
SHIM_PNAME(ncclBcast);
SHIM_PNAME(ncclReduce);
SHIM_PNAME(ncclReduceScatter);
SHIM_PNAME(ncclAllGather);
SHIM_PNAME(ncclSend);
SHIM_PNAME(ncclRecv);
SHIM_PNAME(ncclAlltoAll);
SHIM_PNAME(ncclGather);
SHIM_PNAME(ncclScatter);
SHIM_PNAME(ncclRedOpCreatePreMulSum);
SHIM_PNAME(ncclRedOpDestroy);
SHIM_PNAME(ncclMemAlloc);
SHIM_PNAME(ncclMemFree);
SHIM_PNAME(ncclCommRegister);
SHIM_PNAME(ncclCommDeregister);
