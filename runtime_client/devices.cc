// Device queries and device-wide synchronization (runtime.h).
#include <vector>

#include "absl/strings/str_cat.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::CurrentDevice;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::SetCurrentDevice;
using client::StreamContext;
using client::WithSession;

Error GetDeviceCount(int* count) {
  if (count == nullptr) {
    return ReturnStatus(NullArgumentError("GetDeviceCount", "count"));
  }
  return ReturnStatus(WithSession([count](Session& session) {
    *count = session.device_count();
    return absl::OkStatus();
  }));
}

Error SetDevice(int device) {
  return ReturnStatus(WithSession([device](Session& session) {
    absl::Status valid = session.ValidateDevice(device);
    if (valid.ok()) SetCurrentDevice(device);
    return valid;
  }));
}

Error GetDevice(int* device) {
  if (device == nullptr) {
    return ReturnStatus(NullArgumentError("GetDevice", "device"));
  }
  *device = CurrentDevice();
  return Error::kSuccess;
}

Error GetDeviceProperties(DeviceProperties* properties, int device) {
  if (properties == nullptr) {
    return ReturnStatus(NullArgumentError("GetDeviceProperties", "properties"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::Status valid = session.ValidateDevice(device);
    if (!valid.ok()) return valid;
    proto::GetDevicePropertiesRequest request;
    request.set_device(device);
    proto::GetDevicePropertiesReply reply;
    absl::Status called = session.Call(
        "GetDeviceProperties", &proto::DeviceDaemon::Stub::GetDeviceProperties,
        request, &reply);
    if (!called.ok()) return called;
    const proto::DeviceProperties& from = reply.properties();
    properties->name = from.name();
    properties->total_memory = from.total_memory();
    properties->multiprocessor_count = from.multiprocessor_count();
    properties->major = from.major();
    properties->minor = from.minor();
    return absl::OkStatus();
  }));
}

Error MemGetInfo(size_t* free_bytes, size_t* total_bytes, int device) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return ReturnStatus(NullArgumentError(
        "MemGetInfo", free_bytes == nullptr ? "free_bytes" : "total_bytes"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::Status valid = session.ValidateDevice(device);
    if (!valid.ok()) return valid;
    // The daemon's statistics carry every device's free and total bytes;
    // there is no narrower RPC for it.
    proto::GetStatsReply stats;
    absl::Status called =
        session.Call("GetStats", &proto::DeviceDaemon::Stub::GetStats,
                     proto::GetStatsRequest(), &stats);
    if (!called.ok()) return called;
    for (const proto::DeviceStats& entry : stats.devices()) {
      if (entry.device() == device) {
        *free_bytes = entry.free_bytes();
        *total_bytes = entry.total_bytes();
        return absl::OkStatus();
      }
    }
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon's statistics have no "
                                  "entry for device ",
                                  device));
  }));
}

Error DeviceSynchronize() {
  return ReturnStatus(WithSession([](Session& session) -> absl::Status {
    absl::StatusOr<int> device = session.CurrentDevice();
    if (!device.ok()) return device.status();
    absl::Status unsafe = client::CheckUnsafeCall("synchronizing the device");
    if (!unsafe.ok()) return unsafe;
    // Wait for every stream first, then report the first error, so that
    // an error on one stream never leaves the others running.
    absl::Status waited = session.WaitForDevice(*device);
    if (!waited.ok()) return waited;
    std::vector<StreamContext*> streams;
    session.ForEachActiveStream(*device, [&streams](StreamContext& stream) {
      streams.push_back(&stream);
    });
    for (StreamContext* stream : streams) {
      absl::Status error = session.TakeStreamError(*stream);
      if (!error.ok()) return error;
    }
    return absl::OkStatus();
  }));
}

}  // namespace openreg
