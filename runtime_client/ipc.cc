// IPC memory and event handles (runtime.h): one control round trip each.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "data_plane/device_address.h"
#include "data_plane/ipc_handle.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The public handle types are the daemon's handle bytes, passed through
// untouched: runtime.h states the size without including the data plane.
static_assert(kIpcHandleSize == kIpcHandleBytes,
              "openreg/runtime.h's kIpcHandleSize must be the wire size of "
              "an IPC handle (data_plane/ipc_handle.h)");

using client::EventInfo;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::WithSession;

Error IpcGetMemHandle(IpcMemHandle* handle, void* device_ptr) {
  if (handle == nullptr) {
    return ReturnStatus(NullArgumentError("IpcGetMemHandle", "handle"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcGetMemHandleRequest request;
    session.FillRef(request.mutable_session());
    request.set_address(reinterpret_cast<uint64_t>(device_ptr));
    proto::IpcGetMemHandleReply reply;
    absl::Status status = session.Call(
        "IpcGetMemHandle", &proto::DeviceDaemon::Stub::IpcGetMemHandle, request,
        &reply);
    if (!status.ok()) return status;
    if (reply.handle().size() != kIpcHandleSize) {
      return MakeError(Error::kInternal,
                       absl::StrCat("openreg: the daemon returned a ",
                                    reply.handle().size(), "-byte IPC handle"));
    }
    std::memcpy(handle->bytes, reply.handle().data(), kIpcHandleSize);
    return absl::OkStatus();
  }));
}

Error IpcOpenMemHandle(void** device_ptr, const IpcMemHandle& handle) {
  if (device_ptr == nullptr) {
    return ReturnStatus(NullArgumentError("IpcOpenMemHandle", "device_ptr"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcOpenMemHandleRequest request;
    session.FillRef(request.mutable_session());
    request.set_handle(std::string(reinterpret_cast<const char*>(handle.bytes),
                                   kIpcHandleSize));
    proto::IpcOpenMemHandleReply reply;
    absl::Status status = session.Call(
        "IpcOpenMemHandle", &proto::DeviceDaemon::Stub::IpcOpenMemHandle,
        request, &reply);
    if (!status.ok()) return status;
    session.freed_addresses().Erase(reply.address());
    *device_ptr = reinterpret_cast<void*>(reply.address());
    return absl::OkStatus();
  }));
}

Error IpcCloseMemHandle(void* device_ptr) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcCloseMemHandleRequest request;
    session.FillRef(request.mutable_session());
    request.set_address(reinterpret_cast<uint64_t>(device_ptr));
    proto::IpcCloseMemHandleReply reply;
    return session.Call("IpcCloseMemHandle",
                        &proto::DeviceDaemon::Stub::IpcCloseMemHandle, request,
                        &reply);
  }));
}

Error IpcImportCount(const void* device_ptr, size_t size, uint64_t* opens) {
  if (opens == nullptr) {
    return ReturnStatus(NullArgumentError("IpcImportCount", "opens"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcImportCountRequest request;
    session.FillRef(request.mutable_session());
    request.set_address(reinterpret_cast<uint64_t>(device_ptr));
    request.set_size(size);
    proto::IpcImportCountReply reply;
    absl::Status status = session.Call(
        "IpcImportCount", &proto::DeviceDaemon::Stub::IpcImportCount, request,
        &reply);
    if (status.ok()) *opens = reply.opens();
    return status;
  }));
}

Error IpcGetEventHandle(IpcEventHandle* handle, EventId event) {
  if (handle == nullptr) {
    return ReturnStatus(NullArgumentError("IpcGetEventHandle", "handle"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcGetEventHandleRequest request;
    session.FillRef(request.mutable_session());
    request.set_event_slot(event);
    proto::IpcGetEventHandleReply reply;
    absl::Status status = session.Call(
        "IpcGetEventHandle", &proto::DeviceDaemon::Stub::IpcGetEventHandle,
        request, &reply);
    if (!status.ok()) return status;
    if (reply.handle().size() != kIpcHandleSize) {
      return MakeError(Error::kInternal,
                       absl::StrCat("openreg: the daemon returned a ",
                                    reply.handle().size(), "-byte IPC handle"));
    }
    std::memcpy(handle->bytes, reply.handle().data(), kIpcHandleSize);
    return absl::OkStatus();
  }));
}

Error IpcOpenEventHandle(EventId* event, const IpcEventHandle& handle) {
  if (event == nullptr) {
    return ReturnStatus(NullArgumentError("IpcOpenEventHandle", "event"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::IpcOpenEventHandleRequest request;
    session.FillRef(request.mutable_session());
    request.set_handle(std::string(reinterpret_cast<const char*>(handle.bytes),
                                   kIpcHandleSize));
    proto::IpcOpenEventHandleReply reply;
    absl::Status status = session.Call(
        "IpcOpenEventHandle", &proto::DeviceDaemon::Stub::IpcOpenEventHandle,
        request, &reply);
    if (!status.ok()) return status;
    if (reply.event_slot() >= session.limits().max_events) {
      return MakeError(Error::kInternal,
                       absl::StrCat("openreg: the daemon opened event slot ",
                                    reply.event_slot(),
                                    ", beyond the "
                                    "session's ",
                                    session.limits().max_events, " slots"));
    }
    EventInfo opened;
    opened.device = reply.device();
    opened.timing = false;
    opened.imported = true;
    session.events().Add(reply.event_slot(), opened);
    *event = reply.event_slot();
    return absl::OkStatus();
  }));
}

}  // namespace openreg
