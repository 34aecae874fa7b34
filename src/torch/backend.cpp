// ProcessGroupBraid: bootstrap through the c10d store (or a split of the parent group's
// communicator), the per-group worker thread that runs operations in issue order, WorkBraid,
// and the dtype / op / tensor checks the collectives share.
#include "backend.hpp"

#include <ATen/core/jit_type.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace braid_torch
{

// ---- errors and argument checks --------------------------------------------------------------
void fail(const char *op, braid_result_t res)
{
    std::ostringstream s;
    s << "braid: " << op << " failed: " << braid_strerror(res) << ": " << braid_last_error();
    throw Error(s.str());
}

void refuse(const char *op, const std::string &why)
{
    throw Error(std::string("braid: ") + op + ": " + why);
}

void checkTensor(const char *op, const at::Tensor &t, const char *what)
{
    if (!t.defined()) refuse(op, std::string(what) + " is an undefined tensor");
    if (!t.device().is_cpu())
        refuse(op, std::string(what) + " is on " + t.device().str() +
                       "; the braid backend takes CPU tensors only");
    if (t.layout() != at::kStrided)
        refuse(op, std::string(what) + " is not a dense (strided) tensor");
}

size_t nbytes(const at::Tensor &t)
{
    return (size_t)t.numel() * t.element_size();
}

static const char *opName(const ::c10d::ReduceOp &rop)
{
    switch (rop.op_) {
    case ::c10d::ReduceOp::SUM:
        return "SUM";
    case ::c10d::ReduceOp::AVG:
        return "AVG";
    case ::c10d::ReduceOp::PRODUCT:
        return "PRODUCT";
    case ::c10d::ReduceOp::MIN:
        return "MIN";
    case ::c10d::ReduceOp::MAX:
        return "MAX";
    case ::c10d::ReduceOp::BAND:
        return "BAND";
    case ::c10d::ReduceOp::BOR:
        return "BOR";
    case ::c10d::ReduceOp::BXOR:
        return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM:
        return "PREMUL_SUM";
    default:
        return "unknown";
    }
}

braid_redop_t reduceOp(const char *op, const ::c10d::ReduceOp &rop)
{
    switch (rop.op_) {
    case ::c10d::ReduceOp::SUM:
        return BRAID_SUM;
    case ::c10d::ReduceOp::AVG:
        return BRAID_AVG;
    case ::c10d::ReduceOp::PRODUCT:
        return BRAID_PROD;
    case ::c10d::ReduceOp::MIN:
        return BRAID_MIN;
    case ::c10d::ReduceOp::MAX:
        return BRAID_MAX;
    default:
        refuse(op, std::string("reduce op ") + opName(rop) +
                       " is not supported by braid (SUM, AVG, PRODUCT, MIN, MAX are)");
    }
}

braid_datatype_t reduceDtype(const char *op, const at::Tensor &t, const ::c10d::ReduceOp &rop,
                             size_t *mult_p)
{
    *mult_p = 1;
    auto r = rop.op_;
    switch (t.scalar_type()) {
    case at::kChar:
        return BRAID_INT8;
    case at::kByte:
        return BRAID_UINT8;
    case at::kInt:
        return BRAID_INT32;
    case at::kLong:
        return BRAID_INT64;
    case at::kHalf:
        return BRAID_FLOAT16;
    case at::kBFloat16:
        return BRAID_BFLOAT16;
    case at::kFloat:
        return BRAID_FLOAT32;
    case at::kDouble:
        return BRAID_FLOAT64;
    case at::kBool:
        // 0/1 bytes: MIN is logical and, MAX logical or, PRODUCT and.
        if (r == ::c10d::ReduceOp::MIN || r == ::c10d::ReduceOp::MAX ||
            r == ::c10d::ReduceOp::PRODUCT)
            return BRAID_UINT8;
        refuse(op, std::string("bool tensors reduce with MIN, MAX or PRODUCT only, not ") +
                       opName(rop));
    case at::kComplexFloat:
    case at::kComplexDouble:
        // a complex sum is the sum of its real and imaginary parts
        if (r == ::c10d::ReduceOp::SUM || r == ::c10d::ReduceOp::AVG) {
            *mult_p = 2;
            return t.scalar_type() == at::kComplexFloat ? BRAID_FLOAT32 : BRAID_FLOAT64;
        }
        refuse(op, std::string("complex tensors reduce with SUM or AVG only, not ") + opName(rop));
    default:
        refuse(op, std::string("dtype ") + c10::toString(t.scalar_type()) +
                       " has no braid reduction (int8, uint8, int32, int64, float16, bfloat16, "
                       "float32, float64, bool, complex64, complex128 do)");
    }
}

// ---- WorkBraid ---------------------------------------------------------------------------
WorkBraid::WorkBraid(int rank, ::c10d::OpType type, const char *name,
                     std::vector<at::Tensor> outputs, std::shared_ptr<Completer> completer)
    : ::c10d::Work(rank, type), name_(name), outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      completer_(std::move(completer))
{
    // The first callback (the user's are added later): runs once the future is completed, on
    // the thread that completed it, before the user's callbacks. `this` is alive: only
    // complete() and fail() complete the future, and the Completer holds the work meanwhile.
    future_->addCallback([this](c10::ivalue::Future &f) {
        finish(f.hasError() ? f.exception_ptr() : nullptr);
        if (completer_) completer_->handOff();
    });
}

WorkBraid::~WorkBraid() = default;

bool WorkBraid::wait(std::chrono::milliseconds timeout)
{
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
        cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
        throw Error(std::string("braid: ") + name_ + ": wait timed out after " +
                    std::to_string(timeout.count()) + " ms (the operation is still running)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
}

std::vector<at::Tensor> WorkBraid::result()
{
    return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkBraid::getFuture()
{
    return future_;
}

void WorkBraid::complete()
{
    future_->markCompleted(c10::IValue(outputs_));
}

void WorkBraid::fail(std::exception_ptr err)
{
    future_->setError(err);
}

// ---- Completer -----------------------------------------------------------------------------
void Completer::push(c10::intrusive_ptr<WorkBraid> work, std::exception_ptr err)
{
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(work), std::move(err)});
    startLocked();
    cv_.notify_all();
}

void Completer::startLocked()
{
    // none once stopping: stop() joins what it finds, and completes what no thread is free for
    if (stop_ || leading_ || queue_.empty() || idle_ > 0) return;
    idle_++; // counted as free from now on, so a second push starts no other thread
    live_++;
    auto self = shared_from_this();
    threads_.emplace_back([self] { self->run(); });
}

void Completer::handOff()
{
    std::unique_lock<std::mutex> lock(mu_);
    if (!leading_) return;
    leading_ = false;
    startLocked();
    cv_.notify_all();
}

// The Completer whose thread this is (stop() called from one of its callbacks detaches it).
static thread_local const Completer *tl_completer = nullptr;

void Completer::run()
{
    tl_completer = this;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        // (idle_ counts this thread already: a new thread is counted by startLocked)
        cv_.wait(lock, [&] { return (!leading_ && !queue_.empty()) || (stop_ && queue_.empty()); });
        if (queue_.empty()) break; // stopped and drained
        idle_--;
        completeNextLocked(lock);
        idle_++;
    }
    idle_--;
    live_--;
    cv_.notify_all();
}

void Completer::completeNextLocked(std::unique_lock<std::mutex> &lock)
{
    Item it = std::move(queue_.front());
    queue_.pop_front();
    leading_ = true;
    uint64_t mine = ++lead_;
    lock.unlock();
    try {
        if (it.err)
            it.work->fail(it.err);
        else
            it.work->complete();
    } catch (...) {
        // the future was completed already (only we should) or a callback threw; the
        // future's own callbacks catch a Python callback's error
    }
    it.work.reset();
    lock.lock();
    if (leading_ && lead_ == mine) { // the hand-off did not run (the future was not ours)
        leading_ = false;
        cv_.notify_all();
    }
}

void Completer::stop()
{
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true; // from now on no thread starts (startLocked)
    cv_.notify_all();
    // Called from one of our callbacks, that thread lives on: it returns to run() after.
    const int self = tl_completer == this ? 1 : 0;
    for (;;) {
        // The queue's head is ours to complete when no thread leads and none is free to take it
        // (the threads may all block in callbacks, e.g. waiting for that very work).
        cv_.wait(lock,
                 [&] { return (!queue_.empty() && !leading_ && idle_ == 0) || live_ == self; });
        if (!queue_.empty() && !leading_ && idle_ == 0) {
            completeNextLocked(lock);
            continue;
        }
        break; // the other threads ended (they end only with the queue drained, or self leads)
    }
    std::vector<std::thread> threads;
    threads.swap(threads_); // no thread is added any more
    lock.unlock();
    for (auto &t : threads) {
        if (t.get_id() == std::this_thread::get_id())
            t.detach(); // the group was destroyed from one of its own future callbacks
        else
            t.join();
    }
}

// ---- the process group ---------------------------------------------------------------------
static const char kUidKey[] = "braid_unique_id";

ProcessGroupBraid::ProcessGroupBraid(const c10::intrusive_ptr<::c10d::Store> &store, int rank,
                                     int size, std::chrono::milliseconds timeout,
                                     ProcessGroupBraid *parent)
    : BRAID_TORCH_BASE(rank, size), timeout_(timeout)
{
    if (parent) {
        comm_ = parent->splitChild();
        split_ = true;
    } else {
        braid_unique_id_t id;
        if (rank == 0) {
            braid_result_t r = braid_get_unique_id(&id);
            if (r != BRAID_SUCCESS) fail("init (braid_get_unique_id)", r);
            std::vector<uint8_t> v(sizeof(id));
            std::memcpy(v.data(), &id, sizeof(id));
            store->set(kUidKey, v);
        } else {
            std::vector<uint8_t> v = store->get(kUidKey);
            if (v.size() != sizeof(id))
                refuse("init", "the store's " + std::string(kUidKey) + " has " +
                                   std::to_string(v.size()) + " bytes, expected " +
                                   std::to_string(sizeof(id)));
            std::memcpy(&id, v.data(), sizeof(id));
        }
        braid_result_t r = braid_comm_init_rank(&comm_, size, id, rank);
        if (r != BRAID_SUCCESS) fail("init (braid_comm_init_rank)", r);
    }
    int crank = -1, csize = -1;
    braid_comm_rank(comm_, &crank);
    braid_comm_size(comm_, &csize);
    if (crank != rank || csize != size) {
        braid_comm_destroy(comm_);
        refuse("init", "communicator has rank " + std::to_string(crank) + " of " +
                           std::to_string(csize) + ", the group expects rank " +
                           std::to_string(rank) + " of " + std::to_string(size));
    }
    double t = timeout_.count() > 0 ? (double)timeout_.count() / 1000.0 : 1800.0;
    braid_result_t r = braid_comm_set_timeout(comm_, t);
    if (r != BRAID_SUCCESS) {
        braid_comm_destroy(comm_);
        fail("init (braid_comm_set_timeout)", r);
    }
    applied_timeout_s_ = t;
#if TORCH_VERSION_MAJOR < 2
    init();
#endif
    worker_ = std::thread([this] { runWorker(); });
}

ProcessGroupBraid::~ProcessGroupBraid()
{
    std::deque<Job> left;
    {
        std::unique_lock<std::mutex> lock(mu_);
        stop_ = true;
        left.swap(queue_);
        // an operation still running (or posted) would wait for peers that may never come
        if (running_) braid_comm_abort(comm_);
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    for (auto &j : left)
        completer_->push(j.work,
                         std::make_exception_ptr(
                             Error(std::string("braid: ") + j.work->name() +
                                   ": the process group was destroyed before the operation ran")));
    completer_->stop();
    braid_comm_destroy(comm_);
}

double ProcessGroupBraid::commTimeout() const
{
    double t = 0;
    braid_comm_get_timeout(comm_, &t);
    return t;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::enqueue(::c10d::OpType type, const char *name,
                                                            std::chrono::milliseconds timeout,
                                                            std::vector<at::Tensor> outputs, Fn fn)
{
    auto work = c10::make_intrusive<WorkBraid>(rank_, type, name, std::move(outputs), completer_);
    {
        std::unique_lock<std::mutex> lock(mu_);
        queue_.push_back(Job{work, timeout, std::move(fn), nullptr, nullptr});
    }
    cv_.notify_one();
    return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBraid::enqueueP2P(::c10d::OpType type,
                                                               const char *name,
                                                               std::vector<at::Tensor> outputs,
                                                               Post post, Fn after)
{
    auto work = c10::make_intrusive<WorkBraid>(rank_, type, name, std::move(outputs), completer_);
    {
        std::unique_lock<std::mutex> lock(mu_);
        queue_.push_back(
            Job{work, ::c10d::kUnsetTimeout, nullptr, std::move(post), std::move(after)});
    }
    cv_.notify_one();
    return work;
}

void ProcessGroupBraid::applyTimeout(std::chrono::milliseconds timeout, const char *op)
{
    // an operation's own timeout, else (kUnsetTimeout = -1) the group's, else 30 minutes
    double want = timeout.count() > 0    ? (double)timeout.count() / 1000.0
                  : timeout_.count() > 0 ? (double)timeout_.count() / 1000.0
                                         : 1800.0;
    if (want == applied_timeout_s_) return;
    braid_result_t r = braid_comm_set_timeout(comm_, want);
    if (r != BRAID_SUCCESS) fail(op, r);
    applied_timeout_s_ = want;
}

bool ProcessGroupBraid::progressInFlight(bool block)
{
    bool any = false;
    for (size_t i = 0; i < inflight_.size();) {
        InFlight &f = inflight_[i];
        int done = 1;
        braid_result_t r = block ? braid_wait(f.req) : braid_test(f.req, &done);
        if (!done) {
            i++;
            continue;
        }
        any = true;
        std::exception_ptr err;
        try {
            if (r != BRAID_SUCCESS) fail(f.work->name(), r);
            if (f.after) f.after();
        } catch (...) {
            err = std::current_exception();
        }
        completer_->push(f.work, err); // after `after` copied into the user's tensor
        inflight_.erase(inflight_.begin() + (long)i);
    }
    return any;
}

void ProcessGroupBraid::runWorker()
{
    int idle_us = 10;
    for (;;) {
        Job job;
        bool have = false, waiting = false;
        {
            std::unique_lock<std::mutex> lock(mu_);
            auto ready = [&] { return stop_ || !queue_.empty(); };
            if (inflight_.empty())
                cv_.wait(lock, ready);
            else
                cv_.wait_for(lock, std::chrono::microseconds(idle_us), ready);
            if (stop_) break;
            if (!queue_.empty() && (queue_.front().post || inflight_.empty())) {
                job = std::move(queue_.front());
                queue_.pop_front();
                running_ = true;
                have = true;
            }
            waiting = !queue_.empty() && !have; // an operation waits for the in-flight ones
        }
        if (have && job.post) {
            try {
                // the group's timeout (an earlier operation's own may still be applied)
                applyTimeout(::c10d::kUnsetTimeout, job.work->name());
                braid_request_t req = job.post();
                inflight_.push_back(InFlight{job.work, req, std::move(job.post), job.after});
            } catch (...) {
                completer_->push(job.work, std::current_exception());
            }
            idle_us = 10;
        } else if (have) {
            std::exception_ptr err;
            try {
                applyTimeout(job.timeout, job.work->name()); // for this operation only
                job.fn();
            } catch (...) {
                err = std::current_exception();
            }
            completer_->push(job.work, err);
        } else {
            // poll with a growing interval while idle; block when an operation waits
            idle_us = progressInFlight(waiting) ? 10 : std::min(idle_us * 2, 1000);
        }
        std::unique_lock<std::mutex> lock(mu_);
        running_ = !inflight_.empty();
    }
    // destroyed: the destructor aborted the communicator if anything was in flight
    progressInFlight(true);
}

// Runs braid_comm_split(comm_, 0, rank) on this group's worker (in issue order with its other
// operations, so every rank splits at the same point) and returns the child.
braid_comm_t ProcessGroupBraid::splitChild()
{
    braid_comm_t child = nullptr;
    auto work = enqueue(::c10d::OpType::UNKNOWN, "new_group (braid_comm_split)",
                        ::c10d::kUnsetTimeout, {}, [this, &child] {
                            braid_result_t r = braid_comm_split(comm_, 0, rank_, &child);
                            if (r != BRAID_SUCCESS) fail("new_group (braid_comm_split)", r);
                        });
    work->wait(kNoTimeout);
    return child;
}

} // namespace braid_torch
