// Device memory allocation (runtime.h). Allocation is an RPC; freeing is a
// FreeMemory command on the device's default stream, fenced after every
// other stream of the session (a copy on openreg:1 may read openreg:0's
// memory), so that memory is never released while queued work may still use
// it and Free never blocks.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "data_plane/device_address.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::Client;
using client::ErrorOf;
using client::FormatAddress;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::StreamPosition;
using client::WithSession;

namespace {

absl::Status AllocateOnce(Session& session, int device, size_t size,
                          proto::AllocateReply* reply) {
  proto::AllocateRequest request;
  session.FillRef(request.mutable_session());
  request.set_device(device);
  request.set_size(size);
  return session.Call("Allocate", &proto::DeviceDaemon::Stub::Allocate, request,
                      reply);
}

absl::Status MallocOn(Session& session, void** device_ptr, size_t size) {
  absl::StatusOr<int> device = session.CurrentDevice();
  if (!device.ok()) return device.status();
  proto::AllocateReply reply;
  absl::Status allocated = AllocateOnce(session, *device, size, &reply);
  if (ErrorOf(allocated) == Error::kOutOfMemory) {
    // Frees are stream-ordered: memory this process already freed may
    // still be queued. Let the device drain once, then try again; if it
    // still fails, the daemon's out-of-memory message is what the caller
    // sees.
    absl::Status drained = session.WaitForDevice(*device);
    if (!drained.ok()) return drained;
    reply.Clear();
    allocated = AllocateOnce(session, *device, size, &reply);
  }
  if (!allocated.ok()) return allocated;
  const uint64_t address = reply.address();
  if (!IsDeviceAddress(address) || DeviceOfAddress(address) != *device) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon returned ",
                                  FormatAddress(address), " for an ", size,
                                  "-byte allocation on openreg:", *device));
  }
  session.freed_addresses().Erase(address);
  *device_ptr = reinterpret_cast<void*>(address);
  return absl::OkStatus();
}

absl::Status FreeOn(Session& session, uint64_t address) {
  const int device = DeviceOfAddress(address);
  if (device >= session.device_count()) {
    return MakeError(Error::kInvalidValue,
                     absl::StrCat("openreg: Free(", FormatAddress(address),
                                  "): the pointer names device ", device,
                                  ", but the daemon has ",
                                  session.device_count(), " devices"));
  }
  if (!session.freed_addresses().Insert(address)) {
    return MakeError(Error::kInvalidValue,
                     absl::StrCat("openreg: Free(", FormatAddress(address),
                                  "): the pointer was already freed "
                                  "(double free)"));
  }
  StreamContext& default_stream = session.DefaultStream(device);
  // No stream is deactivated (destroyed) between choosing the fences and
  // noting them: its destroyer then waits for this free.
  absl::ReaderMutexLock fences(&session.fence_mutex());
  proto::Command command;
  proto::FreeMemory* free_memory = command.mutable_free();
  free_memory->set_address(address);
  // Other streams (of any device: cross-device copies read across) may
  // still have queued work on this memory: the daemon releases it only once
  // each has passed what is queued now.
  session.ForEachActiveStream([&](StreamContext& stream) {
    if (&stream == &default_stream) return;
    const StreamPosition position{
        stream.slot, stream.last_submitted.load(std::memory_order_acquire)};
    if (session.IsFinished(position)) return;
    proto::WaitStream* fence = free_memory->add_fences();
    fence->set_stream_slot(position.slot);
    fence->set_sequence(position.sequence);
  });
  absl::StatusOr<uint64_t> submitted =
      session.SubmitCommand(default_stream, &command);
  if (!submitted.ok()) {
    session.freed_addresses().Erase(address);  // the free did not happen
    return submitted.status();
  }
  for (const proto::WaitStream& fence : free_memory->fences()) {
    session.NoteWaiter(fence.stream_slot(), {default_stream.slot, *submitted});
  }
  return absl::OkStatus();
}

}  // namespace

Error Malloc(void** device_ptr, size_t size) {
  if (device_ptr == nullptr) {
    return ReturnStatus(NullArgumentError("Malloc", "device_ptr"));
  }
  *device_ptr = nullptr;
  if (size == 0) return Error::kSuccess;  // as cudaMalloc: a null pointer
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::Status unsafe = client::CheckUnsafeCall("allocating device memory");
    if (!unsafe.ok()) return unsafe;
    return MallocOn(session, device_ptr, size);
  }));
}

Error Free(void* device_ptr) {
  if (device_ptr == nullptr) return Error::kSuccess;  // as cudaFree
  const uint64_t address = reinterpret_cast<uint64_t>(device_ptr);
  if (!IsDeviceAddress(address)) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue,
                  absl::StrCat("openreg: Free(", FormatAddress(address),
                               "): not a device pointer (Free takes pointers "
                               "returned by Malloc)")));
  }
  return ReturnStatus(WithSession(
      [address](Session& session) { return FreeOn(session, address); }));
}

Error PointerGetDevice(const void* ptr, int* device) {
  if (device == nullptr) {
    return ReturnStatus(NullArgumentError("PointerGetDevice", "device"));
  }
  const uint64_t address = reinterpret_cast<uint64_t>(ptr);
  const std::shared_ptr<Session> session = Client::Get().CurrentSession();
  if (!IsDeviceAddress(address) ||
      (session != nullptr &&
       DeviceOfAddress(address) >= session->device_count())) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue,
                  absl::StrCat("openreg: ", FormatAddress(address),
                               " is not an openreg device pointer")));
  }
  *device = DeviceOfAddress(address);
  return Error::kSuccess;
}

}  // namespace openreg
