// The c10d collectives of ProcessGroupBraid on braid's C API. Arguments are checked on the
// caller's thread (a clear RuntimeError at the call); the braid call runs on the group's worker.
// Reductions map torch dtypes to braid's (complex as pairs of reals for SUM/AVG, bool as 0/1
// bytes for MIN/MAX/PRODUCT); data movement (broadcast, gathers, scatters, all-to-all, send/recv)
// moves bytes, so every dtype works. Non-contiguous tensors go through a contiguous copy that
// is copied back into them after the operation.
#include "backend.hpp"

#include <cstring>

namespace braid_torch
{

using ::c10d::OpType;

namespace
{

// A tensor's data for braid: never NULL (an empty tensor may have no storage; braid checks
// pointers even for count 0).
void *ptr(const at::Tensor &t)
{
    static char dummy;
    void *p = t.data_ptr();
    return p ? p : &dummy;
}

// A contiguous tensor with t's data: t itself when it is contiguous, else a copy.
at::Tensor contig(const at::Tensor &t)
{
    return t.is_contiguous() ? t : t.contiguous();
}

// After the operation: copies buf back into t when buf was a staging copy.
void copyBack(const at::Tensor &t, const at::Tensor &buf)
{
    if (!buf.is_same(t)) t.copy_(buf);
}

const at::Tensor &one(const char *op, const std::vector<at::Tensor> &v)
{
    if (v.size() != 1)
        refuse(op, "takes exactly one tensor per process, got " + std::to_string(v.size()));
    checkTensor(op, v[0], "tensor");
    return v[0];
}

void sameShape(const char *op, const at::Tensor &a, const at::Tensor &b, const char *what)
{
    checkTensor(op, a, what);
    if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel())
        refuse(op, std::string(what) + " has dtype " + c10::toString(a.scalar_type()) + " and " +
                       std::to_string(a.numel()) + " elements; the input has " +
                       c10::toString(b.scalar_type()) + " and " + std::to_string(b.numel()));
}

void checkRoot(const char *op, int64_t root, int size)
{
    if (root < 0 || root >= size)
        refuse(op, "root rank " + std::to_string(root) + " is outside [0, " + std::to_string(size) +
                       ")");
}

[[noreturn]] [[maybe_unused]] void pending(const char *op, const char *api)
{
    refuse(op, std::string("not available yet: this braid has no ") + api +
                   " (pending in braid's public API)");
}

} // namespace

#define BRAID_CALL(op, call)                                                                       \
    do {                                                                                           \
        braid_result_t r_ = (call);                                                                \
        if (r_ != BRAID_SUCCESS) fail(op, r_);                                                     \
    } while (0)

// ---- reductions ----------------------------------------------------------------------------
c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor> &tensors,
                                                              const ::c10d::AllreduceOptions &opts)
{
    static const char op[] = "allreduce";
    at::Tensor t = one(op, tensors);
    size_t mult;
    braid_datatype_t dt = reduceDtype(op, t, opts.reduceOp, &mult);
    braid_redop_t bop = reduceOp(op, opts.reduceOp);
    at::Tensor buf = contig(t);
    return enqueue(OpType::ALLREDUCE, op, opts.timeout, tensors, [=] {
        void *p = ptr(buf);
        BRAID_CALL(op, braid_allreduce(p, p, (size_t)buf.numel() * mult, dt, bop, comm_));
        copyBack(t, buf);
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                       const ::c10d::AllreduceCoalescedOptions &opts)
{
    static const char op[] = "allreduce_coalesced";
    if (tensors.empty()) refuse(op, "got no tensors");
    size_t mult = 1;
    braid_datatype_t dt = BRAID_FLOAT32;
    for (size_t i = 0; i < tensors.size(); i++) {
        checkTensor(op, tensors[i], "tensor");
        if (tensors[i].scalar_type() != tensors[0].scalar_type())
            refuse(op, "tensors must all have one dtype: tensor " + std::to_string(i) + " is " +
                           c10::toString(tensors[i].scalar_type()) + ", tensor 0 " +
                           c10::toString(tensors[0].scalar_type()));
        dt = reduceDtype(op, tensors[i], opts.reduceOp, &mult);
    }
    braid_redop_t bop = reduceOp(op, opts.reduceOp);
    std::vector<at::Tensor> flat;
    for (auto &t : tensors)
        flat.push_back(t.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    std::vector<at::Tensor> outs = tensors;
    return enqueue(OpType::ALLREDUCE_COALESCED, op, opts.timeout, tensors, [=] {
        void *p = ptr(packed);
        BRAID_CALL(op, braid_allreduce(p, p, (size_t)packed.numel() * mult, dt, bop, comm_));
        int64_t off = 0;
        for (auto &t : outs) {
            t.copy_(packed.narrow(0, off, t.numel()).view(t.sizes()));
            off += t.numel();
        }
    });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor> &tensors,
                                                           const ::c10d::ReduceOptions &opts)
{
    static const char op[] = "reduce";
    at::Tensor t = one(op, tensors);
    checkRoot(op, opts.rootRank, size_);
    if (opts.rootTensor != 0) refuse(op, "rootTensor must be 0 (one tensor per process)");
    size_t mult;
    braid_datatype_t dt = reduceDtype(op, t, opts.reduceOp, &mult);
    braid_redop_t bop = reduceOp(op, opts.reduceOp);
    int root = (int)opts.rootRank;
    at::Tensor buf = contig(t);
    return enqueue(OpType::REDUCE, op, opts.timeout, tensors, [=] {
        void *p = ptr(buf);
        BRAID_CALL(op, braid_reduce(p, p, (size_t)buf.numel() * mult, dt, bop, root, comm_));
        if (rank_ == root) copyBack(t, buf);
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor> &outputs,
                                  std::vector<std::vector<at::Tensor>> &inputs,
                                  const ::c10d::ReduceScatterOptions &opts)
{
    static const char op[] = "reduce_scatter";
    at::Tensor out = one(op, outputs);
    if (inputs.size() != 1 || (int)inputs[0].size() != size_)
        refuse(op, "takes one list of " + std::to_string(size_) + " input tensors");
    for (auto &in : inputs[0])
        sameShape(op, in, out, "an input tensor");
    size_t mult;
    braid_datatype_t dt = reduceDtype(op, out, opts.reduceOp, &mult);
    braid_redop_t bop = reduceOp(op, opts.reduceOp);
    std::vector<at::Tensor> flat;
    for (auto &in : inputs[0])
        flat.push_back(in.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    at::Tensor buf = contig(out);
    return enqueue(OpType::REDUCE_SCATTER, op, opts.timeout, outputs, [=] {
        BRAID_CALL(op, braid_reduce_scatter(ptr(packed), ptr(buf), (size_t)buf.numel() * mult, dt,
                                            bop, comm_));
        copyBack(out, buf);
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                        const ::c10d::ReduceScatterOptions &opts)
{
    static const char op[] = "_reduce_scatter_base";
    checkTensor(op, output, "output");
    checkTensor(op, input, "input");
    if (input.scalar_type() != output.scalar_type() || input.numel() != output.numel() * size_)
        refuse(op, "input must have the output's dtype and " + std::to_string(size_) +
                       " times its " + std::to_string(output.numel()) + " elements, got " +
                       c10::toString(input.scalar_type()) + " with " +
                       std::to_string(input.numel()));
    size_t mult;
    braid_datatype_t dt = reduceDtype(op, output, opts.reduceOp, &mult);
    braid_redop_t bop = reduceOp(op, opts.reduceOp);
    at::Tensor in = contig(input), buf = contig(output);
    return enqueue(OpType::_REDUCE_SCATTER_BASE, op, opts.timeout, {output}, [=] {
        BRAID_CALL(op, braid_reduce_scatter(ptr(in), ptr(buf), (size_t)buf.numel() * mult, dt, bop,
                                            comm_));
        copyBack(output, buf);
    });
}

// ---- data movement (bytes) -------------------------------------------------------------
c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor> &tensors,
                                                              const ::c10d::BroadcastOptions &opts)
{
    static const char op[] = "broadcast";
    at::Tensor t = one(op, tensors);
    checkRoot(op, opts.rootRank, size_);
    if (opts.rootTensor != 0) refuse(op, "rootTensor must be 0 (one tensor per process)");
    int root = (int)opts.rootRank;
    at::Tensor buf = contig(t);
    return enqueue(OpType::BROADCAST, op, opts.timeout, tensors, [=] {
        void *p = ptr(buf);
        BRAID_CALL(op, braid_broadcast(p, p, nbytes(buf), BRAID_UINT8, root, comm_));
        copyBack(t, buf);
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs, const ::c10d::AllgatherOptions &opts)
{
    static const char op[] = "allgather";
    at::Tensor in = one(op, inputs);
    if (outputs.size() != 1 || (int)outputs[0].size() != size_)
        refuse(op, "takes one list of " + std::to_string(size_) + " output tensors");
    for (auto &o : outputs[0])
        sameShape(op, o, in, "an output tensor");
    at::Tensor src = contig(in);
    at::Tensor flat = at::empty({(int64_t)size_ * in.numel()}, in.options());
    std::vector<at::Tensor> outs = outputs[0];
    return enqueue(OpType::ALLGATHER, op, opts.timeout, outs, [=] {
        BRAID_CALL(op, braid_allgather(ptr(src), ptr(flat), nbytes(src), BRAID_UINT8, comm_));
        for (int r = 0; r < size_; r++)
            outs[r].copy_(
                flat.narrow(0, (int64_t)r * src.numel(), src.numel()).view(outs[r].sizes()));
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::_allgather_base(at::Tensor &output, at::Tensor &input,
                                   const ::c10d::AllgatherOptions &opts)
{
    static const char op[] = "_allgather_base";
    checkTensor(op, output, "output");
    checkTensor(op, input, "input");
    if (input.scalar_type() != output.scalar_type() || output.numel() != input.numel() * size_)
        refuse(op, "output must have the input's dtype and " + std::to_string(size_) +
                       " times its " + std::to_string(input.numel()) + " elements, got " +
                       c10::toString(output.scalar_type()) + " with " +
                       std::to_string(output.numel()));
    at::Tensor src = contig(input), buf = contig(output);
    return enqueue(OpType::_ALLGATHER_BASE, op, opts.timeout, {output}, [=] {
        BRAID_CALL(op, braid_allgather(ptr(src), ptr(buf), nbytes(src), BRAID_UINT8, comm_));
        copyBack(output, buf);
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputLists,
                                       std::vector<at::Tensor> &inputs,
                                       const ::c10d::AllgatherOptions &opts)
{
    static const char op[] = "allgather_coalesced";
    if ((int)outputLists.size() != size_)
        refuse(op, "takes " + std::to_string(size_) + " output lists (one per rank), got " +
                       std::to_string(outputLists.size()));
    size_t total = 0;
    std::vector<at::Tensor> srcs;
    for (auto &in : inputs) {
        checkTensor(op, in, "an input tensor");
        srcs.push_back(contig(in));
        total += nbytes(in);
    }
    for (auto &list : outputLists) {
        if (list.size() != inputs.size())
            refuse(op, "each output list must hold " + std::to_string(inputs.size()) +
                           " tensors (as many as the inputs), got " + std::to_string(list.size()));
        for (size_t i = 0; i < list.size(); i++)
            sameShape(op, list[i], inputs[i], "an output tensor");
    }
    std::vector<at::Tensor> outs;
    for (auto &list : outputLists)
        for (auto &o : list)
            outs.push_back(o);
    at::Tensor packed = at::empty({(int64_t)total}, at::kByte);
    at::Tensor all = at::empty({(int64_t)(total * size_)}, at::kByte);
    size_t n = inputs.size();
    return enqueue(OpType::ALLGATHER_COALESCED, op, opts.timeout, outs, [=] {
        char *p = (char *)ptr(packed);
        for (auto &s : srcs) {
            std::memcpy(p, ptr(s), nbytes(s));
            p += nbytes(s);
        }
        BRAID_CALL(op, braid_allgather(ptr(packed), ptr(all), total, BRAID_UINT8, comm_));
        const char *q = (const char *)ptr(all);
        for (size_t k = 0; k < outs.size(); k++) {
            const at::Tensor &o = outs[k];
            size_t nb = nbytes(srcs[k % n]);
            if (o.is_contiguous()) {
                std::memcpy(ptr(o), q, nb);
            } else {
                at::Tensor tmp = at::empty(o.sizes(), o.options());
                std::memcpy(ptr(tmp), q, nb);
                o.copy_(tmp);
            }
            q += nb;
        }
    });
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>> &outputs,
                          std::vector<at::Tensor> &inputs, const ::c10d::GatherOptions &opts)
{
    static const char op[] = "gather";
    at::Tensor in = one(op, inputs);
    checkRoot(op, opts.rootRank, size_);
    int root = (int)opts.rootRank;
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
        if (outputs.size() != 1 || (int)outputs[0].size() != size_)
            refuse(op, "the root takes one list of " + std::to_string(size_) + " output tensors");
        for (auto &o : outputs[0])
            sameShape(op, o, in, "an output tensor");
        outs = outputs[0];
    } else if (!outputs.empty() && !outputs[0].empty()) {
        refuse(op, "only the root rank takes output tensors");
    }
#if BRAID_TORCH_HAVE_GATHER
    at::Tensor src = contig(in);
    at::Tensor flat =
        rank_ == root ? at::empty({(int64_t)size_ * in.numel()}, in.options()) : at::Tensor();
    return enqueue(OpType::GATHER, op, opts.timeout, outs, [=] {
        BRAID_CALL(op, braid_gather(ptr(src), flat.defined() ? ptr(flat) : nullptr, nbytes(src),
                                    BRAID_UINT8, root, comm_));
        for (int r = 0; r < (int)outs.size(); r++)
            outs[r].copy_(
                flat.narrow(0, (int64_t)r * src.numel(), src.numel()).view(outs[r].sizes()));
    });
#else
    (void)opts;
    pending(op, "braid_gather");
#endif
}

c10::intrusive_ptr<::c10d::Work>
ProcessGroupBraid::scatter(std::vector<at::Tensor> &outputs,
                           std::vector<std::vector<at::Tensor>> &inputs,
                           const ::c10d::ScatterOptions &opts)
{
    static const char op[] = "scatter";
    at::Tensor out = one(op, outputs);
    checkRoot(op, opts.rootRank, size_);
    int root = (int)opts.rootRank;
    std::vector<at::Tensor> ins;
    if (rank_ == root) {
        if (inputs.size() != 1 || (int)inputs[0].size() != size_)
            refuse(op, "the root takes one list of " + std::to_string(size_) + " input tensors");
        for (auto &i : inputs[0])
            sameShape(op, i, out, "an input tensor");
        ins = inputs[0];
    } else if (!inputs.empty() && !inputs[0].empty()) {
        refuse(op, "only the root rank takes input tensors");
    }
#if BRAID_TORCH_HAVE_SCATTER
    at::Tensor packed;
    if (rank_ == root) {
        std::vector<at::Tensor> flat;
        for (auto &i : ins)
            flat.push_back(i.reshape({-1}));
        packed = at::cat(flat);
    }
    at::Tensor buf = contig(out);
    return enqueue(OpType::SCATTER, op, opts.timeout, outputs, [=] {
        BRAID_CALL(op, braid_scatter(packed.defined() ? ptr(packed) : nullptr, ptr(buf),
                                     nbytes(buf), BRAID_UINT8, root, comm_));
        copyBack(out, buf);
    });
#else
    (void)opts;
    pending(op, "braid_scatter");
#endif
}

// Rows of dim 0 per rank: splits (as given, or even) -> byte counts and displacements.
static void splitBytes(const char *op, const at::Tensor &t, const std::vector<int64_t> &splits,
                       int size, const char *what, std::vector<size_t> &counts,
                       std::vector<size_t> &displs)
{
    int64_t rows = t.dim() ? t.size(0) : 1;
    size_t row_bytes = rows ? nbytes(t) / (size_t)rows : 0;
    counts.assign(size, 0);
    displs.assign(size, 0);
    if (splits.empty()) {
        if (rows % size)
            refuse(op, std::string(what) + "'s " + std::to_string(rows) +
                           " rows do not divide by the group size " + std::to_string(size) +
                           " (pass split sizes)");
        for (int r = 0; r < size; r++)
            counts[r] = (size_t)(rows / size) * row_bytes;
    } else {
        if ((int)splits.size() != size)
            refuse(op, std::string(what) + " split sizes have " + std::to_string(splits.size()) +
                           " entries, the group has " + std::to_string(size) + " ranks");
        int64_t sum = 0;
        for (int r = 0; r < size; r++) {
            if (splits[r] < 0) refuse(op, std::string(what) + " split size is negative");
            sum += splits[r];
            counts[r] = (size_t)splits[r] * row_bytes;
        }
        if (sum != rows)
            refuse(op, std::string(what) + " split sizes add up to " + std::to_string(sum) +
                           ", the tensor has " + std::to_string(rows) + " rows");
    }
    for (int r = 1; r < size; r++)
        displs[r] = displs[r - 1] + counts[r - 1];
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &outputSplits,
    std::vector<int64_t> &inputSplits, const ::c10d::AllToAllOptions &opts)
{
    static const char op[] = "alltoall_base";
    checkTensor(op, output, "output");
    checkTensor(op, input, "input");
    if (input.scalar_type() != output.scalar_type()) refuse(op, "input and output dtypes differ");
    std::vector<size_t> sc, sd, rc, rd;
    splitBytes(op, input, inputSplits, size_, "input", sc, sd);
    splitBytes(op, output, outputSplits, size_, "output", rc, rd);
#if BRAID_TORCH_HAVE_ALLTOALL
    at::Tensor src = contig(input), buf = contig(output);
    return enqueue(OpType::ALLTOALL_BASE, op, opts.timeout, {output}, [=] {
        BRAID_CALL(op, braid_alltoallv(ptr(src), sc.data(), sd.data(), ptr(buf), rc.data(),
                                       rd.data(), BRAID_UINT8, comm_));
        copyBack(output, buf);
    });
#else
    (void)opts;
    pending(op, "braid_alltoallv");
#endif
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor> &outputs,
                                                             std::vector<at::Tensor> &inputs,
                                                             const ::c10d::AllToAllOptions &opts)
{
    static const char op[] = "alltoall";
    if ((int)outputs.size() != size_ || (int)inputs.size() != size_)
        refuse(op, "takes " + std::to_string(size_) + " input and output tensors, got " +
                       std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
    std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
    size_t sin = 0, sout = 0;
    for (int r = 0; r < size_; r++) {
        checkTensor(op, inputs[r], "an input tensor");
        checkTensor(op, outputs[r], "an output tensor");
        if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
            outputs[r].scalar_type() != inputs[0].scalar_type())
            refuse(op, "all tensors must have one dtype");
        sc[r] = nbytes(inputs[r]);
        sd[r] = sin;
        sin += sc[r];
        rc[r] = nbytes(outputs[r]);
        rd[r] = sout;
        sout += rc[r];
    }
#if BRAID_TORCH_HAVE_ALLTOALL
    std::vector<at::Tensor> flat;
    for (auto &i : inputs)
        flat.push_back(i.reshape({-1}));
    at::Tensor packed = at::cat(flat);
    at::Tensor recv = at::empty({(int64_t)sout}, at::kByte);
    std::vector<at::Tensor> outs = outputs;
    return enqueue(OpType::ALLTOALL, op, opts.timeout, outs, [=] {
        BRAID_CALL(op, braid_alltoallv(ptr(packed), sc.data(), sd.data(), ptr(recv), rc.data(),
                                       rd.data(), BRAID_UINT8, comm_));
        for (int r = 0; r < size_; r++) {
            at::Tensor tmp = at::empty(outs[r].sizes(), outs[r].options());
            std::memcpy(ptr(tmp), (const char *)ptr(recv) + rd[r], rc[r]);
            outs[r].copy_(tmp);
        }
    });
#else
    (void)opts;
    pending(op, "braid_alltoallv");
#endif
}

// ---- point-to-point ----------------------------------------------------------------------
c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor> &tensors, int dst,
                                                         int tag)
{
    static const char op[] = "send";
    at::Tensor t = one(op, tensors);
    checkRoot(op, dst, size_);
    if (tag != 0) refuse(op, "tags are not supported (tag " + std::to_string(tag) + "; use 0)");
#if BRAID_TORCH_HAVE_P2P
    at::Tensor buf = contig(t);
    return enqueueP2P(
        OpType::SEND, op, tensors,
        [=] {
            braid_request_t req = nullptr;
            BRAID_CALL(op, braid_isend(ptr(buf), nbytes(buf), BRAID_UINT8, dst, comm_, &req));
            return req;
        },
        nullptr);
#else
    pending(op, "braid_send");
#endif
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor> &tensors, int src,
                                                         int tag)
{
    static const char op[] = "recv";
    at::Tensor t = one(op, tensors);
    checkRoot(op, src, size_);
    if (tag != 0) refuse(op, "tags are not supported (tag " + std::to_string(tag) + "; use 0)");
#if BRAID_TORCH_HAVE_P2P
    at::Tensor buf = contig(t);
    return enqueueP2P(
        OpType::RECV, op, tensors,
        [=] {
            braid_request_t req = nullptr;
            BRAID_CALL(op, braid_irecv(ptr(buf), nbytes(buf), BRAID_UINT8, src, comm_, &req));
            return req;
        },
        [=] { copyBack(t, buf); });
#else
    pending(op, "braid_recv");
#endif
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::recvAnysource(std::vector<at::Tensor> &tensors,
                                                                  int tag)
{
    (void)tensors;
    (void)tag;
    refuse("recvAnysource", "receiving from any source is not supported (braid_recv names its "
                            "peer); pass src");
}

// ---- barriers ------------------------------------------------------------------------------
c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::barrier(const ::c10d::BarrierOptions &opts)
{
    static const char op[] = "barrier";
    return enqueue(OpType::BARRIER, op, opts.timeout, {},
                   [=] { BRAID_CALL(op, braid_barrier(comm_)); });
}

void ProcessGroupBraid::monitoredBarrier(const ::c10d::BarrierOptions &opts, bool waitAllRanks)
{
    // braid's barrier fails within the timeout naming the rank it waited on (a dead or silent
    // one); it cannot list every missing rank as Gloo's monitored barrier does.
    (void)waitAllRanks;
    static const char op[] = "monitoredBarrier";
    auto work = enqueue(OpType::BARRIER, op, opts.timeout, {},
                        [=] { BRAID_CALL(op, braid_barrier(comm_)); });
    work->wait(kNoTimeout);
}

} // namespace braid_torch
