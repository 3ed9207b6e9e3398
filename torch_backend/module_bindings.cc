#include "torch_backend/module_bindings.h"

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data_plane/module_abi.h"
#include "op_codec/kernel_settings.h"
#include "openreg/modules.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/launch_settings.h"
#include "torch_backend/op_encoding.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

namespace py = pybind11;

// Each argument is a tensor on one openreg device, an int (or bool) or a
// float; the kernel runs on the current stream of the tensors' device.
// `one_thread_if_small`: the kernel's bits do not depend on the thread
// count (kernels.py, thread_invariant), and it runs on one thread when
// every tensor has at most ATen's GRAIN_SIZE elements, as an eager launch
// does (device_daemon/kernels/launch_threads.h): a parallel region wakes
// an OpenMP worker that must be scheduled beside the client's Python,
// which on a small host costs more than a small kernel saves.
void LaunchModuleKernelOnCurrentStream(uint64_t module,
                                       const std::string& kernel,
                                       const py::list& arguments,
                                       const std::vector<bool>& written,
                                       bool one_thread_if_small) {
  TORCH_CHECK_VALUE(written.size() == arguments.size(),
                    "openreg: ", arguments.size(), " arguments but ",
                    written.size(), " written flags for compiled kernel ",
                    kernel);
  proto::LaunchModuleKernel launch;
  launch.set_module(module);
  launch.set_kernel(kernel);
  bool small = true;
  std::optional<c10::DeviceIndex> device;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const py::handle value = arguments[i];
    proto::ModuleArgument* argument = launch.add_arguments();
    argument->set_written(written[i]);
    if (THPVariable_Check(value.ptr())) {
      const at::Tensor& tensor = THPVariable_Unpack(value.ptr());
      TORCH_CHECK_VALUE(tensor.device().type() == DeviceGuardImpl::kDeviceType,
                        "openreg: ", "argument ", i, " of compiled kernel ",
                        kernel, " is a tensor on ", tensor.device(),
                        "; a compiled openreg kernel takes openreg tensors");
      TORCH_CHECK_VALUE(
          !device.has_value() || *device == tensor.device().index(),
          "openreg: compiled kernel ", kernel,
          " has tensors on openreg:", static_cast<int>(*device), " and ",
          tensor.device(), "; a kernel runs on one device");
      device = tensor.device().index();
      small = small && tensor.numel() <= at::internal::GRAIN_SIZE;
      EncodeTensorRef(tensor, argument->mutable_tensor());
    } else if (py::isinstance<py::bool_>(value) ||
               py::isinstance<py::int_>(value)) {
      argument->set_int_value(value.cast<int64_t>());
    } else if (py::isinstance<py::float_>(value)) {
      argument->set_double_value(value.cast<double>());
    } else {
      TORCH_CHECK_TYPE(false, "openreg: argument ", i, " of compiled kernel ",
                       kernel, " is a ",
                       py::str(value.get_type()).cast<std::string>(),
                       "; expected an openreg tensor, an int or a float");
    }
  }
  op_codec::KernelSettings settings = LaunchSettings();
  if (one_thread_if_small && small) {
    settings.intra_op_threads = 1;
  }
  if (settings != op_codec::KernelSettings()) {
    op_codec::EncodeKernelSettings(settings, launch.mutable_settings());
  }
  const c10::DeviceIndex target =
      device.value_or(DeviceGuardImpl().getDevice().index());
  OPENREG_CHECK(openreg::LaunchModuleKernel(
      launch, static_cast<StreamId>(CurrentStream(target).id())));
}

}  // namespace

void RegisterModuleBindings(py::module& m) {
  m.attr("_module_abi_version") = kModuleAbiVersion;
  m.attr("_module_abi_symbol") = kModuleAbiSymbol;
  m.attr("_module_entry_symbol") = kModuleEntrySymbol;
  m.def(
      "_load_module",
      [](const std::string& path) {
        ModuleId module = 0;
        OPENREG_CHECK(openreg::LoadModule(path, &module));
        return module;
      },
      py::arg("path"));
  m.def(
      "_unload_module",
      [](uint64_t module) { OPENREG_CHECK(openreg::UnloadModule(module)); },
      py::arg("module"));
  m.def("_launch_module_kernel", &LaunchModuleKernelOnCurrentStream,
        py::arg("module"), py::arg("kernel"), py::arg("arguments"),
        py::arg("written"), py::arg("one_thread_if_small") = false);
}

}  // namespace openreg::torch_backend
