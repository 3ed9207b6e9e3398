#include "torch_backend/distributed/occl_bindings.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "torch_backend/distributed/process_group_occl.h"

namespace openreg::torch_backend {

namespace py = pybind11;

void RegisterOcclBindings(py::module_& module) {
  module.def("_occl_init", [module]() mutable {
    if (py::hasattr(module, "ProcessGroupOCCL")) return;
    // torch.distributed's Backend must be registered with pybind11 first.
    py::module_::import("torch.distributed");
    py::class_<ProcessGroupOCCL, c10d::Backend,
               c10::intrusive_ptr<ProcessGroupOCCL>>(module, "ProcessGroupOCCL")
        .def(py::init(
                 [](int rank, int size, std::chrono::milliseconds timeout,
                    const std::string& comm_id, int local_rank, int local_size,
                    std::vector<int> host_of_rank,
                    std::optional<c10::intrusive_ptr<c10d::Backend>> leaders) {
                   ProcessGroupOCCL::Hosts hosts;
                   hosts.local_rank = local_rank;
                   hosts.local_size = local_size;
                   hosts.host_of_rank = std::move(host_of_rank);
                   if (leaders.has_value()) hosts.leaders = *leaders;
                   return c10::make_intrusive<ProcessGroupOCCL>(
                       rank, size, timeout, comm_id, std::move(hosts));
                 }),
             py::arg("rank"), py::arg("size"), py::arg("timeout"),
             py::arg("comm_id"), py::arg("local_rank"), py::arg("local_size"),
             py::arg("host_of_rank"), py::arg("leaders"),
             py::call_guard<py::gil_scoped_release>());
  });
}

}  // namespace openreg::torch_backend
