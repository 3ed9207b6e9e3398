#include "torch_backend/distributed/occl_bindings.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <torch/csrc/distributed/c10d/Store.hpp>

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
        .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank,
                         int size, std::chrono::milliseconds timeout) {
               return c10::make_intrusive<ProcessGroupOCCL>(store, rank, size,
                                                            timeout);
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"),
             py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  });
}

}  // namespace openreg::torch_backend
