// The Python extension braid_torch._C: the ProcessGroupBraid type and the creator that
// torch.distributed calls for backend "braid" (registered by braid_torch/__init__.py with the
// extended API, so the creator sees the group's global ranks).
#include "backend.hpp"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <mutex>

namespace py = pybind11;

namespace braid_torch
{

// The Python objects' holder of a process group: the last reference drops with the GIL released,
// since ~ProcessGroupBraid joins threads that may need the GIL for a future's Python callback (as
// torch's own IntrusivePtrNoGilDestructor, which its 1.13 headers do not export). Its layout is
// that of c10::intrusive_ptr<T> (pybind11 reads a base class's holder as the base's).
template <typename T> class NoGilDestructor
{
  public:
    NoGilDestructor() = default;
    NoGilDestructor(const NoGilDestructor &) = default;
    NoGilDestructor(NoGilDestructor &&) noexcept = default;
    NoGilDestructor &operator=(const NoGilDestructor &) = default;
    NoGilDestructor &operator=(NoGilDestructor &&) noexcept = default;
    NoGilDestructor(c10::intrusive_ptr<T> p) : p_(std::move(p)) {}
    // pybind11 makes a holder from a raw pointer (the object is already owned by an intrusive_ptr)
    explicit NoGilDestructor(T *p) : p_(c10::intrusive_ptr<T>::reclaim_copy(p)) {}
    ~NoGilDestructor()
    {
        if (p_ && PyGILState_Check()) {
            py::gil_scoped_release nogil;
            p_.reset();
        }
    }
    T *get() const noexcept
    {
        return p_.get();
    }
    T &operator*() const noexcept
    {
        return *p_;
    }
    T *operator->() const noexcept
    {
        return p_.get();
    }

  private:
    c10::intrusive_ptr<T> p_;
};

} // namespace braid_torch

PYBIND11_DECLARE_HOLDER_TYPE(T, braid_torch::NoGilDestructor<T>, true);

namespace braid_torch
{
namespace
{

// The default (world) group of this process, if it runs on braid: groups over all of its ranks
// are made from it with braid_comm_split instead of a new bootstrap.
std::mutex g_world_mu;
c10::weak_intrusive_ptr<ProcessGroupBraid> g_world{c10::intrusive_ptr<ProcessGroupBraid>()};

NoGilDestructor<ProcessGroupBraid> create(const ::c10d::DistributedBackendOptions &o)
{
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
    const auto &ranks = o.global_ranks_in_group;
    c10::intrusive_ptr<ProcessGroupBraid> parent;
    if (!ranks.empty()) {
        std::lock_guard<std::mutex> lock(g_world_mu);
        parent = g_world.lock();
        bool whole = parent && (int64_t)ranks.size() == parent->getSize() &&
                     parent->getRank() == o.group_rank;
        for (size_t i = 0; whole && i < ranks.size(); i++)
            whole = ranks[i] == (int64_t)i;
        if (!whole) parent.reset();
    }
    c10::intrusive_ptr<ProcessGroupBraid> pg;
    {
        py::gil_scoped_release nogil;
        pg = c10::make_intrusive<ProcessGroupBraid>(o.store, o.group_rank, o.group_size, ms,
                                                    parent.get());
    }
    if (ranks.empty()) {
        std::lock_guard<std::mutex> lock(g_world_mu);
        g_world = c10::weak_intrusive_ptr<ProcessGroupBraid>(pg);
    }
    return pg;
}

} // namespace
} // namespace braid_torch

PYBIND11_MODULE(_C, m)
{
    m.doc() = "braid as a torch.distributed backend (import braid_torch registers \"braid\")";
    py::module::import("torch.distributed");
    py::class_<braid_torch::ProcessGroupBraid, BRAID_TORCH_BASE,
               braid_torch::NoGilDestructor<braid_torch::ProcessGroupBraid>>(m, "ProcessGroupBraid")
        .def_property_readonly("made_by_split", &braid_torch::ProcessGroupBraid::madeBySplit,
                               "whether the group's communicator came from braid_comm_split")
        .def_property_readonly("comm_timeout", &braid_torch::ProcessGroupBraid::commTimeout,
                               "the communicator's per-operation timeout in seconds");
    m.def(
        "_create",
        [](const ::c10d::DistributedBackendOptions &o, py::object) {
            return braid_torch::create(o);
        },
        py::arg("options"), py::arg("pg_options") = py::none());
    m.def("braid_version", &braid_version, "braid_version() of the linked libbraid");
}
