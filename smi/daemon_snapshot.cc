#include "smi/daemon_snapshot.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/error_codes.h"
#include "grpcpp/grpcpp.h"

namespace openreg::smi {
namespace {

bool Shown(int device, const std::vector<int>& only) {
  return only.empty() ||
         std::find(only.begin(), only.end(), device) != only.end();
}

template <typename Request, typename Reply, typename Method>
absl::Status Call(proto::DeviceDaemon::Stub& stub, Method method,
                  const char* name, const std::string& socket,
                  absl::Duration deadline, Reply* reply) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(deadline));
  const grpc::Status transport = (stub.*method)(&context, Request(), reply);
  if (!transport.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "couldn't communicate with the openreg daemon at ", socket, " (",
        transport.error_message(),
        "). Start one with `openreg-daemon &`, or run a program that uses "
        "an openreg device (it spawns one), or name another socket with "
        "--socket or $OPENREG_DAEMON_SOCKET."));
  }
  if (reply->status().code() != proto::OK) {
    return absl::FailedPreconditionError(
        absl::StrCat("the daemon at ", socket, " refused ", name, ": ",
                     ErrorInfo(reply->status().code()).name, ": ",
                     reply->status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<const proto::DeviceStats*> DaemonSnapshot::Devices(
    const std::vector<int>& only) const {
  std::vector<const proto::DeviceStats*> devices;
  for (const proto::DeviceStats& device : stats.devices()) {
    if (Shown(device.device(), only)) devices.push_back(&device);
  }
  return devices;
}

std::vector<ProcessOnDevice> DaemonSnapshot::Processes(
    const std::vector<int>& only) const {
  std::vector<ProcessOnDevice> rows;
  for (const proto::SessionInfo& session : sessions.sessions()) {
    bool anywhere = false;
    for (const proto::SessionDeviceUsage& usage : session.devices()) {
      if (usage.allocated_bytes() == 0 && usage.streams() <= 1) continue;
      anywhere = true;
      if (!Shown(usage.device(), only)) continue;
      rows.push_back(
          {&session, usage.device(), usage.allocated_bytes(), usage.streams()});
    }
    if (!anywhere && only.empty()) rows.push_back({&session, -1, 0, 0});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ProcessOnDevice& a, const ProcessOnDevice& b) {
                     return a.device < b.device;
                   });
  return rows;
}

absl::StatusOr<DaemonSnapshot> TakeDaemonSnapshot(
    proto::DeviceDaemon::Stub& stub, const std::string& socket,
    absl::Duration deadline) {
  DaemonSnapshot snapshot;
  snapshot.socket = socket;
  absl::Status status = Call<proto::GetStatsRequest>(
      stub, &proto::DeviceDaemon::Stub::GetStats, "GetStats", socket, deadline,
      &snapshot.stats);
  if (!status.ok()) return status;
  status = Call<proto::ListSessionsRequest>(
      stub, &proto::DeviceDaemon::Stub::ListSessions, "ListSessions", socket,
      deadline, &snapshot.sessions);
  if (!status.ok()) return status;
  snapshot.taken = absl::Now();
  return snapshot;
}

}  // namespace openreg::smi
