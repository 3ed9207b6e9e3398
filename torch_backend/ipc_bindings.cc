#include "torch_backend/ipc_bindings.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/Storage.h>

#include <cstring>
#include <string>

#include "openreg/runtime.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

namespace py = pybind11;

// The handle of the memory at `data_ptr` (a storage's first byte), which
// also keeps the caching allocator from reusing the block while another
// process holds it open.
py::bytes Share(uint64_t data_ptr, int device) {
  void* ptr = reinterpret_cast<void*>(data_ptr);
  IpcMemHandle handle;
  OPENREG_CHECK(IpcGetMemHandle(&handle, ptr));
  GetDeviceAllocator().MarkShared(ptr, static_cast<c10::DeviceIndex>(device));
  return py::bytes(reinterpret_cast<const char*>(handle.bytes),
                   sizeof(handle.bytes));
}

void CloseImported(void* ptr) {
  // A lost daemon or an ended session took the mapping with it already.
  IgnoreError(IpcCloseMemHandle(ptr), "the import is gone with its session");
}

// A storage of `nbytes` over the memory another process shared; closing
// the handle is the storage's deleter.
py::object Open(const std::string& bytes, size_t nbytes, int device) {
  TORCH_CHECK_VALUE(bytes.size() == kIpcHandleSize,
                    "openreg: an IPC handle is ", kIpcHandleSize,
                    " bytes, got ", bytes.size());
  IpcMemHandle handle;
  std::memcpy(handle.bytes, bytes.data(), kIpcHandleSize);
  const c10::Device where(c10::DeviceType::PrivateUse1,
                          static_cast<c10::DeviceIndex>(device));
  void* ptr = nullptr;
  {
    const c10::DeviceGuard guard(where);
    OPENREG_CHECK(IpcOpenMemHandle(&ptr, handle));
  }
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes,
      c10::DataPtr(ptr, ptr, &CloseImported, where),
      /*allocator=*/nullptr, /*resizable=*/false));
  return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(storage)));
}

}  // namespace

void RegisterIpcBindings(py::module& m) {
  m.def("_ipc_share", &Share, py::arg("data_ptr"), py::arg("device"));
  m.def("_ipc_open", &Open, py::arg("handle"), py::arg("nbytes"),
        py::arg("device"));
  m.def("_ipc_collect", [] { return GetDeviceAllocator().CollectShared(); });
}

}  // namespace openreg::torch_backend
