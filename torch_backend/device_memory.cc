#include "torch_backend/device_memory.h"

#include "torch_backend/ignored_error.h"

namespace openreg::torch_backend {
namespace {

// Runs `fn` with the runtime's current device set to `device`.
template <typename Fn>
Error OnDevice(c10::DeviceIndex device, Fn fn) {
  int previous = 0;
  torch_backend::IgnoreError(GetDevice(&previous),
                             "the device is set below either way");
  if (previous != device) {
    const Error set = SetDevice(device);
    if (set != Error::kSuccess) return set;
  }
  const Error error = fn();
  if (previous != device) {
    torch_backend::IgnoreError(SetDevice(previous),
                               "restoring a device that was current");
  }
  return error;
}

}  // namespace

Error RuntimeDeviceMemory::Malloc(void** ptr, size_t size) {
  return OnDevice(device_, [&] { return openreg::Malloc(ptr, size); });
}

Error RuntimeDeviceMemory::Free(void* ptr) { return openreg::Free(ptr); }

Error RuntimeDeviceMemory::ImportCount(const void* ptr, size_t size,
                                       uint64_t* opens) {
  return openreg::IpcImportCount(ptr, size, opens);
}

Error RuntimeDeviceMemory::MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return openreg::MemGetInfo(free_bytes, total_bytes, device_);
}

Error RuntimeDeviceMemory::CreateEvent(EventId* event) {
  return OnDevice(device_,
                  [&] { return EventCreate(event, kEventDisableTiming); });
}

Error RuntimeDeviceMemory::RecordEvent(EventId event, StreamId stream) {
  return EventRecord(event, stream);
}

Error RuntimeDeviceMemory::QueryEvent(EventId event) {
  return EventQuery(event);
}

Error RuntimeDeviceMemory::SynchronizeEvent(EventId event) {
  return EventSynchronize(event);
}

std::string RuntimeDeviceMemory::LastErrorMessage() {
  return GetLastErrorMessage();
}

void RuntimeDeviceMemory::IgnoreError(Error error, const char* reason) {
  torch_backend::IgnoreError(error, reason);
}

}  // namespace openreg::torch_backend
