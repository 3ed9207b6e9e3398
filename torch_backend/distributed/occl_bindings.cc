#include "torch_backend/distributed/occl_bindings.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data_plane/flight_recorder_settings.h"
#include "openreg/collectives.h"
#include "torch_backend/distributed/process_group_occl.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {

namespace py = pybind11;

void RegisterOcclBindings(py::module_& module) {
  // The flight recorder's traces of this process's job (or of `pid`'s), by
  // global rank: pickles in PyTorch's format.
  module.def(
      "_occl_flight_recorder_traces",
      [](int pid) {
        std::map<int, std::string> traces;
        {
          const py::gil_scoped_release released;
          OPENREG_CHECK(DumpFlightRecorder(&traces, pid));
        }
        py::dict by_rank;
        for (const auto& [rank, trace] : traces) {
          by_rank[py::int_(rank)] = py::bytes(trace);
        }
        return by_rank;
      },
      py::arg("pid") = 0);
  // Where dumps go unless told: $TORCH_FR_DUMP_TEMP_FILE, else NCCL's
  // default.
  module.def("_occl_flight_recorder_prefix",
             [] { return FlightRecorderSettingsFromEnvironment().prefix; });
  // `former(store, rank, size, timeout)` forms a group (the Python
  // creator's logic); split() calls it for its subgroups.
  module.def("_occl_init", [module](const py::function& former) mutable {
    if (py::hasattr(module, "ProcessGroupOCCL")) return;
    // Never destroyed: it may be called until the process exits, and a
    // Python object must not be released after the interpreter.
    auto* kept = new py::function(former);
    ProcessGroupOCCL::SetGroupFormer(
        [kept](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               std::chrono::milliseconds timeout) {
          const py::gil_scoped_acquire gil;
          return (*kept)(store, rank, size, timeout)
              .cast<c10::intrusive_ptr<c10d::Backend>>();
        });
    // torch.distributed's Backend must be registered with pybind11 first.
    py::module_::import("torch.distributed");
    py::class_<ProcessGroupOCCL, c10d::Backend,
               c10::intrusive_ptr<ProcessGroupOCCL>>(module, "ProcessGroupOCCL")
        .def(py::init(
                 [](int rank, int size, std::chrono::milliseconds timeout,
                    const std::string& comm_id, int local_rank, int local_size,
                    std::vector<int> host_of_rank,
                    std::optional<c10::intrusive_ptr<c10d::Backend>> leaders,
                    std::optional<c10::intrusive_ptr<c10d::Backend>> everyone,
                    std::vector<int> global_ranks) {
                   ProcessGroupOCCL::Hosts hosts;
                   hosts.local_rank = local_rank;
                   hosts.local_size = local_size;
                   hosts.host_of_rank = std::move(host_of_rank);
                   if (leaders.has_value()) hosts.leaders = *leaders;
                   if (everyone.has_value()) hosts.everyone = *everyone;
                   return c10::make_intrusive<ProcessGroupOCCL>(
                       rank, size, timeout, comm_id, std::move(hosts),
                       std::move(global_ranks));
                 }),
             py::arg("rank"), py::arg("size"), py::arg("timeout"),
             py::arg("comm_id"), py::arg("local_rank"), py::arg("local_size"),
             py::arg("host_of_rank"), py::arg("leaders"), py::arg("everyone"),
             py::arg("global_ranks") = std::vector<int>(),
             py::call_guard<py::gil_scoped_release>())
        // c10d's split_group deep-copies the parent's options, which the
        // base Options class cannot be: None makes split() use
        // getBackendOptions() instead.
        .def_property_readonly(
            "options", [](const ProcessGroupOCCL&) { return py::none(); });
  });
}

}  // namespace openreg::torch_backend
