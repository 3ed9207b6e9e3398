// torch_openreg._C: the Python bindings of the openreg runtime. Loading the
// module registers the PrivateUse1 kernels, guard, hooks and allocator; it
// never connects to the daemon.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>

#include <string>

#include "data_plane/device_address.h"
#include "data_plane/reply_json.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/distributed/occl_bindings.h"
#include "torch_backend/fault_bindings.h"
#include "torch_backend/generator.h"
#include "torch_backend/graph_bindings.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/ipc_bindings.h"
#include "torch_backend/kernel_warnings.h"
#include "torch_backend/kernels/blocked_ops.h"
#include "torch_backend/kernels/decomposed_cpu_ops.h"
#include "torch_backend/kernels/foreach_ops.h"
#include "torch_backend/kernels/cpp_meta_kernels.h"
#include "torch_backend/kernels/fast_path_ops.h"
#include "torch_backend/kernels/quantized_ops.h"
#include "torch_backend/kernels/sparse_ops.h"
#include "torch_backend/kernels/structured_ops.h"
#include "torch_backend/memory_bindings.h"
#include "torch_backend/module_bindings.h"
#include "torch_backend/runtime_error.h"
#include "torch_backend/sync_debug.h"

namespace openreg::torch_backend {
namespace {

namespace py = pybind11;

py::dict DeviceProperties(int device) {
  openreg::DeviceProperties properties;
  OPENREG_CHECK(GetDeviceProperties(&properties, device));
  py::dict result;
  result["name"] = properties.name;
  result["total_memory"] = properties.total_memory;
  result["multi_processor_count"] = properties.multiprocessor_count;
  result["major"] = properties.major;
  result["minor"] = properties.minor;
  return result;
}

// As JSON (data_plane/reply_json.h), like every other reply Python reads:
// torch.openreg.daemon_stats() makes the dicts.
std::string DaemonStats() {
  proto::GetStatsReply stats;
  OPENREG_CHECK(GetStats(&stats));
  return ReplyToJson(stats);
}

std::string CostProfileJson(int action) {
  proto::CostProfileReply reply;
  OPENREG_CHECK(CostProfile(
      static_cast<proto::CostProfileRequest::Action>(action), &reply));
  return ReplyToJson(reply);
}

int DeviceCount() {
  int count = 0;
  OPENREG_CHECK(GetDeviceCount(&count));
  return count;
}

int CurrentDevice() {
  int device = 0;
  OPENREG_CHECK(GetDevice(&device));
  return device;
}

py::tuple MemoryInfo(int device) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  OPENREG_CHECK(MemGetInfo(&free_bytes, &total_bytes, device));
  return py::make_tuple(free_bytes, total_bytes);
}

// (stream_id, device_index, device_type): the arguments torch.Stream takes.
py::tuple StreamArgs(const c10::Stream& stream) {
  return py::make_tuple(stream.id(), stream.device_index(),
                        static_cast<int>(stream.device_type()));
}

// torch.cuda.set_stream's semantics: the stream's device becomes current,
// and the stream becomes that device's current stream on this thread.
void SetCurrentStream(int64_t stream_id, int device) {
  int current = 0;
  OPENREG_CHECK(GetDevice(&current));
  if (current != device) OPENREG_CHECK(SetDevice(device));
  ExchangeStream(c10::Stream(c10::Stream::UNSAFE,
                             c10::Device(DeviceGuardImpl::kDeviceType,
                                         static_cast<c10::DeviceIndex>(device)),
                             static_cast<c10::StreamId>(stream_id)));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "openreg runtime bindings (daemon-backed PrivateUse1 device)";
  // After every static registration of this library (see the header).
  RouteStructuredOpsToDaemon();
  RouteDecomposedCpuOpsToDaemon();
  RouteForeachOpsToDaemon();
  RouteSparseOpsToDaemon();
  RouteQuantizedOpsToDaemon();
  m.def("_set_daemon_binary", &SetDaemonBinary, py::arg("path"));
  m.def("_is_connected", &IsConnected);
  m.def("_init", [] { OPENREG_CHECK(Init()); });
  m.def("_device_count", &DeviceCount);
  m.def("_is_available", [] {
    int count = 0;
    return IgnoreError(GetDeviceCount(&count),
                       "no daemon or no device is is_available()'s answer") ==
               Error::kSuccess &&
           count > 0;
  });
  m.def("_current_device", &CurrentDevice);
  m.def("_set_device", [](int device) { OPENREG_CHECK(SetDevice(device)); });
  m.def("_synchronize", [](int device) {
    // torch's warning handler: kernel warnings raised here become Python
    // warnings (through the warnings filters) when the call returns.
    HANDLE_TH_ERRORS
    int previous = 0;
    OPENREG_CHECK(GetDevice(&previous));
    OPENREG_CHECK(SetDevice(device));
    const Error error = DeviceSynchronize();
    SetDevice(previous);
    OPENREG_CHECK(error);
    RaisePendingKernelWarnings();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_set_sync_timeout",
        [](double seconds) { OPENREG_CHECK(SetSyncTimeout(seconds)); });
  m.def("_get_sync_timeout", &GetSyncTimeout);
  // Checked in Python (torch.openreg.set_sync_debug_mode): 0, 1 or 2.
  m.def(
      "_set_sync_debug_mode",
      [](int mode) { SetSyncDebugMode(static_cast<SyncDebugMode>(mode)); },
      py::arg("mode"));
  m.def("_get_sync_debug_mode",
        [] { return static_cast<int>(GetSyncDebugMode()); });
  m.def("_get_device_properties", &DeviceProperties, py::arg("device"));
  m.def("_mem_get_info", &MemoryInfo, py::arg("device"));
  m.def(
      "_set_memory_fraction",
      [](double fraction, int device) {
        GetDeviceAllocator().SetMemoryFraction(
            fraction, static_cast<c10::DeviceIndex>(device));
      },
      py::arg("fraction"), py::arg("device"));
  m.def("_daemon_stats", &DaemonStats);
  m.def("_daemon_socket_path", &DaemonSocketPath);
  m.def("_cost_profile", &CostProfileJson, py::arg("action"));
  m.def("_is_in_bad_fork", &InForkedChild);
  RegisterFaultBindings(m);
  RegisterIpcBindings(m);
  RegisterMemoryBindings(m);
  RegisterGraphBindings(m);
  RegisterModuleBindings(m);
  RegisterOcclBindings(m);
  // Streams, for torch.openreg.streams (the device guard's thread-local
  // current streams and the per-device stream pools).
  m.def(
      "_current_stream",
      [](int device) {
        return StreamArgs(CurrentStream(static_cast<c10::DeviceIndex>(device)));
      },
      py::arg("device"));
  m.def(
      "_default_stream",
      [](int device) {
        return StreamArgs(DefaultStream(static_cast<c10::DeviceIndex>(device)));
      },
      py::arg("device"));
  m.def("_set_stream", &SetCurrentStream, py::arg("stream_id"),
        py::arg("device"));
  m.def(
      "_stream_from_pool",
      [](int device, int priority) {
        return StreamArgs(
            StreamFromPool(static_cast<c10::DeviceIndex>(device), priority));
      },
      py::arg("device"), py::arg("priority"));
  m.def(
      "_stream_priority",
      [](int64_t stream_id, int device) {
        return StreamPriority(
            c10::Stream(c10::Stream::UNSAFE,
                        c10::Device(DeviceGuardImpl::kDeviceType,
                                    static_cast<c10::DeviceIndex>(device)),
                        static_cast<c10::StreamId>(stream_id)));
      },
      py::arg("stream_id"), py::arg("device"));
  m.def(
      "_stream_device",
      [](int64_t stream_id) {
        TORCH_CHECK_VALUE(stream_id >= 0 && stream_id <= UINT32_MAX,
                          "openreg: ", stream_id, " is not a stream id");
        int device = 0;
        OPENREG_CHECK(
            StreamGetDevice(static_cast<StreamId>(stream_id), &device));
        return device;
      },
      py::arg("stream_id"));
  m.attr("_stream_priority_range") =
      py::make_tuple(kLeastStreamPriority, kGreatestStreamPriority);
  m.attr("_pool_streams_per_priority") = kPoolStreamsPerPriority;
  // Extension points (docs/EXTENDING.md).
  m.def("_block_op", &BlockOp, py::arg("name"));
  m.def("_unblock_op", &UnblockOp, py::arg("name"));
  m.def("_blocked_ops", &BlockedOps);
  m.def("_fast_path_launch_count", &FastPathLaunchCount);
  m.def("_cpp_meta_kernel_ops", &CppMetaKernelOps);
  // The default generators live in this process, so neither needs the
  // daemon: seeding works before (and without) connecting.
  m.attr("_max_devices") = kMaxDevices;
  m.def(
      "_get_default_generator",
      [](int device) {
        return py::reinterpret_steal<py::object>(
            THPGenerator_initDefaultGenerator(
                DefaultGenerator(static_cast<c10::DeviceIndex>(device))));
      },
      py::arg("device"));
}

}  // namespace openreg::torch_backend
