#include "torch_backend/ipc_bindings.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/Storage.h>

#include <cstring>
#include <memory>
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

// An interprocess event (torch.openreg.Event(interprocess=True)), created
// here or opened from another process's handle; destroyed with the object.
class InterprocessEvent {
 public:
  static std::unique_ptr<InterprocessEvent> Create(int device) {
    const c10::DeviceGuard guard(DeviceOf(device));
    EventId event = 0;
    OPENREG_CHECK(
        EventCreate(&event, kEventInterprocess | kEventDisableTiming));
    return std::unique_ptr<InterprocessEvent>(
        new InterprocessEvent(event, device));
  }
  static std::unique_ptr<InterprocessEvent> Open(const std::string& bytes,
                                                 int device) {
    TORCH_CHECK_VALUE(bytes.size() == kIpcHandleSize,
                      "openreg: an IPC event handle is ", kIpcHandleSize,
                      " bytes, got ", bytes.size());
    IpcEventHandle handle;
    std::memcpy(handle.bytes, bytes.data(), kIpcHandleSize);
    const c10::DeviceGuard guard(DeviceOf(device));
    EventId event = 0;
    OPENREG_CHECK(IpcOpenEventHandle(&event, handle));
    return std::unique_ptr<InterprocessEvent>(
        new InterprocessEvent(event, device));
  }
  InterprocessEvent(const InterprocessEvent&) = delete;
  InterprocessEvent& operator=(const InterprocessEvent&) = delete;
  ~InterprocessEvent() {
    IgnoreError(EventDestroy(event_), "the event is gone with its session");
  }

  int device() const { return device_; }
  void Record(int64_t stream) {
    OPENREG_CHECK(EventRecord(event_, static_cast<StreamId>(stream)));
  }
  void Wait(int64_t stream) {
    OPENREG_CHECK(StreamWaitEvent(static_cast<StreamId>(stream), event_));
  }
  bool Query() {
    const Error error = EventQuery(event_);
    if (error == Error::kNotReady) return false;
    OPENREG_CHECK(error);
    return true;
  }
  void Synchronize() {
    // Waits may be long (another process's work): let other threads run.
    py::gil_scoped_release released;
    OPENREG_CHECK(EventSynchronize(event_));
  }
  py::bytes Handle() {
    IpcEventHandle handle;
    OPENREG_CHECK(IpcGetEventHandle(&handle, event_));
    return py::bytes(reinterpret_cast<const char*>(handle.bytes),
                     sizeof(handle.bytes));
  }

 private:
  InterprocessEvent(EventId event, int device)
      : event_(event), device_(device) {}
  static c10::Device DeviceOf(int device) {
    return c10::Device(c10::DeviceType::PrivateUse1,
                       static_cast<c10::DeviceIndex>(device));
  }

  const EventId event_;
  const int device_;
};

}  // namespace

void RegisterIpcBindings(py::module& m) {
  py::class_<InterprocessEvent>(m, "_InterprocessEvent")
      .def(py::init(&InterprocessEvent::Create), py::arg("device"))
      .def_static("open", &InterprocessEvent::Open, py::arg("handle"),
                  py::arg("device"))
      .def_property_readonly("device", &InterprocessEvent::device)
      .def("record", &InterprocessEvent::Record, py::arg("stream_id"))
      .def("wait", &InterprocessEvent::Wait, py::arg("stream_id"))
      .def("query", &InterprocessEvent::Query)
      .def("synchronize", &InterprocessEvent::Synchronize)
      .def("handle", &InterprocessEvent::Handle);
  m.def("_ipc_share", &Share, py::arg("data_ptr"), py::arg("device"));
  m.def("_ipc_open", &Open, py::arg("handle"), py::arg("nbytes"),
        py::arg("device"));
  m.def("_ipc_collect", [] { return GetDeviceAllocator().CollectShared(); });
}

}  // namespace openreg::torch_backend
