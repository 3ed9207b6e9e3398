#include "torch_backend/graph_bindings.h"

#include <cstdint>

#include "openreg/graphs.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/graphs/graph_impl.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {

namespace py = pybind11;

void RegisterGraphBindings(py::module& m) {
  // Once the backend is named "openreg": the registry's key is the name.
  m.def("_register_graph_impl", &RegisterGraphImpl);
  m.def("_graph_pool_handle", [] { return NewGraphPoolId(); });
  m.def(
      "_is_stream_capturing",
      [](int64_t stream) {
        CaptureStatus status = CaptureStatus::kNone;
        OPENREG_CHECK(
            StreamGetCaptureStatus(static_cast<StreamId>(stream), &status));
        return status != CaptureStatus::kNone;
      },
      py::arg("stream"));
  m.def(
      "_exchange_capture_mode",
      [](int mode) {
        auto exchanged = static_cast<CaptureMode>(mode);
        OPENREG_CHECK(ExchangeCaptureMode(&exchanged));
        return static_cast<int>(exchanged);
      },
      py::arg("mode"));
}

}  // namespace openreg::torch_backend
