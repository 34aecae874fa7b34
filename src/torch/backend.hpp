// braid as a c10d backend: ProcessGroupBraid runs every operation on braid's public C API
// (include/braid/braid.h only) on one worker thread per group, in the order the operations were
// issued. Each call returns a WorkBraid at once; when the worker has run it, the group's
// Completer completes it (its future, which DDP's reducer waits on, then the work) with the
// output tensors, or with braid's error message, on threads other than the worker: a future's
// callbacks run where the future is completed, and may issue operations and wait for them.
#pragma once

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>

#include <braid/braid.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// torch >= 2.0 splits the backend (c10d::Backend) from the user-facing ProcessGroup.
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define BRAID_TORCH_BASE ::c10d::Backend
#else
#define BRAID_TORCH_BASE ::c10d::ProcessGroup
#endif

namespace braid_torch
{

// Thrown for every failure; pybind11 turns it into RuntimeError with the text.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class WorkBraid;

// Completes the works the group's worker has run, in the order it ran them, off the worker
// thread. The future's callbacks run on the thread that completes it, and a callback may issue
// an operation and wait for it (torch's powerSGD_hook does): run on the worker, it would wait
// for an operation queued behind itself. One thread at a time takes the next work from the
// queue (the leader); it completes the future, and the future's first callback (added when the
// work is made, so it runs before the user's) finishes the work (wait() returns) and hands the
// leader role on, before the user's callbacks run. A callback that blocks thus holds its own
// thread, never the queue: when work is queued and no thread is free, another one starts (as
// many as callbacks block at once). The order stays: a work's future and wait() complete only
// after the earlier works' did.
class Completer : public std::enable_shared_from_this<Completer>
{
  public:
    // Queues work for completion with its outputs (err null) or with err.
    void push(c10::intrusive_ptr<WorkBraid> work, std::exception_ptr err);
    // The first callback of every work's future: the next work may be completed.
    void handOff();
    // Completes what is queued (on the threads, or here when none is free for it), then ends
    // the threads and joins them (a thread that calls stop from a callback detaches itself);
    // no thread starts once stop has begun. Nothing may be pushed after.
    void stop();

  private:
    struct Item {
        c10::intrusive_ptr<WorkBraid> work;
        std::exception_ptr err;
    };
    void run();
    void startLocked(); // starts a thread when work waits and none is free (mu_ held)
    // Completes the queue's head as the leader (mu_ held, released meanwhile).
    void completeNextLocked(std::unique_lock<std::mutex> &lock);

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Item> queue_;
    bool leading_ = false; // a thread is completing the queue's former head
    uint64_t lead_ = 0;    // counts the leaders (a leader hands off once)
    int idle_ = 0;         // threads waiting for work
    int live_ = 0;         // threads started whose run() has not returned
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

class WorkBraid : public ::c10d::Work
{
  public:
    WorkBraid(int rank, ::c10d::OpType type, const char *name, std::vector<at::Tensor> outputs,
              std::shared_ptr<Completer> completer);
    ~WorkBraid() override;

    // Waits up to timeout (kNoTimeout: until done); rethrows the operation's error.
    bool wait(std::chrono::milliseconds timeout) override;
    std::vector<at::Tensor> result() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

    // Called once, by the Completer: completes the future (the work itself is finished by
    // the future's first callback, so wait() returns only once the future is completed).
    void complete();
    void fail(std::exception_ptr err);

    const char *name() const
    {
        return name_;
    }

  private:
    const char *name_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
    std::shared_ptr<Completer> completer_;
};

class ProcessGroupBraid : public BRAID_TORCH_BASE
{
  public:
    // Bootstraps a new braid communicator through store (group rank 0 creates the unique id
    // and sets it under a key of the store; the others get it), or, when parent is given,
    // splits parent's communicator (color 0: every parent rank must create it).
    ProcessGroupBraid(const c10::intrusive_ptr<::c10d::Store> &store, int rank, int size,
                      std::chrono::milliseconds timeout, ProcessGroupBraid *parent = nullptr);
    ~ProcessGroupBraid() override;

    const std::string getBackendName() const override
    {
        return "braid";
    }

    c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                               const ::c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                               const ::c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work>
    allreduce_coalesced(std::vector<at::Tensor> &tensors,
                        const ::c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                            const ::c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                               std::vector<at::Tensor> &inputs,
                                               const ::c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                     const ::c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work>
    allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputLists,
                        std::vector<at::Tensor> &inputs,
                        const ::c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const ::c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                             std::vector<std::vector<at::Tensor>> &inputs,
                                             const ::c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work>
    reduce_scatter(std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
                   const ::c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const ::c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                   std::vector<int64_t> &outputSplits,
                                                   std::vector<int64_t> &inputSplits,
                                                   const ::c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                              std::vector<at::Tensor> &inputs,
                                              const ::c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor> &tensors, int dst,
                                          int tag) override;
    c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor> &tensors, int src,
                                          int tag) override;
    c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors,
                                                   int tag) override;
    c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions &opts) override;
    void monitoredBarrier(const ::c10d::BarrierOptions &opts, bool waitAllRanks) override;

    // For tests and logs: whether this group's communicator came from braid_comm_split.
    bool madeBySplit() const
    {
        return split_;
    }
    // The communicator's per-operation timeout in seconds (braid_comm_get_timeout).
    double commTimeout() const;

  private:
    using Fn = std::function<void()>;
    // Starts a non-blocking braid call and returns its request (throws Error on failure).
    using Post = std::function<braid_request_t()>;
    struct Job {
        c10::intrusive_ptr<WorkBraid> work;
        std::chrono::milliseconds timeout;
        Fn fn;     // a blocking operation, or
        Post post; // a point-to-point one, completed later, then
        Fn after;  // run after it completed (copies into the user's tensor)
    };
    struct InFlight {
        c10::intrusive_ptr<WorkBraid> work;
        braid_request_t req;
        // The closure that posted req, kept until req completed: it holds the staging
        // (contiguous) copies that braid reads or writes meanwhile.
        Post post;
        Fn after;
    };

    // Queues fn (run on the worker thread, throws Error on failure); returns its work.
    c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, const char *name,
                                             std::chrono::milliseconds timeout,
                                             std::vector<at::Tensor> outputs, Fn fn);
    // Queues a point-to-point operation: the worker posts it (braid_isend/irecv) and goes on
    // posting the point-to-point operations queued after it, so that sends and receives
    // issued in any order progress together (as Gloo's do); the next other operation waits
    // until every posted one completed.
    c10::intrusive_ptr<::c10d::Work> enqueueP2P(::c10d::OpType type, const char *name,
                                                std::vector<at::Tensor> outputs, Post post,
                                                Fn after);
    void runWorker();
    // Completes the in-flight operations that are done (every one when block); true if any.
    bool progressInFlight(bool block);
    // Sets the communicator's timeout to timeout's (kUnsetTimeout: the group's) unless it is
    // applied already (throws Error naming op on failure).
    void applyTimeout(std::chrono::milliseconds timeout, const char *op);
    braid_comm_t splitChild();

    braid_comm_t comm_ = nullptr;
    bool split_ = false;
    std::chrono::milliseconds timeout_;
    double applied_timeout_s_ = 0;

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> queue_;
    std::vector<InFlight> inflight_; // the worker's own
    bool stop_ = false;
    bool running_ = false;
    std::thread worker_;
    std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
};

// Helpers shared by the collectives (backend.cpp).
[[noreturn]] void fail(const char *op, braid_result_t res);
[[noreturn]] void refuse(const char *op, const std::string &why);
void checkTensor(const char *op, const at::Tensor &t, const char *what);
// braid dtype and element multiplier (complex = 2 reals) for a reduction with op.
braid_datatype_t reduceDtype(const char *op, const at::Tensor &t, const ::c10d::ReduceOp &rop,
                             size_t *mult_p);
braid_redop_t reduceOp(const char *op, const ::c10d::ReduceOp &rop);
size_t nbytes(const at::Tensor &t);

} // namespace braid_torch
