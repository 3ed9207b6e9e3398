// One look at a running daemon for openreg-smi: its devices (GetStats) and
// its attached processes (ListSessions), taken over the control socket
// without a session, so looking never holds device memory.
#ifndef OPENREG_SMI_DAEMON_SNAPSHOT_H_
#define OPENREG_SMI_DAEMON_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "protos/control.grpc.pb.h"

namespace openreg::smi {

// One process on one device: a row of the process table and of
// --query-compute-apps.
struct ProcessOnDevice {
  const proto::SessionInfo* session = nullptr;
  int device = -1;  // -1: the process holds nothing on any device yet
  uint64_t allocated_bytes = 0;
  uint32_t streams = 0;
};

struct DaemonSnapshot {
  std::string socket;
  absl::Time taken;
  proto::GetStatsReply stats;
  proto::ListSessionsReply sessions;

  // The devices to show: all, or those of `only` (--id).
  std::vector<const proto::DeviceStats*> Devices(
      const std::vector<int>& only) const;
  // Each process on each device where it holds memory or has created a
  // stream (every session has a default stream on every device, which
  // alone does not count); a process with neither anywhere gets one row
  // with device -1, shown only when `only` is empty.
  std::vector<ProcessOnDevice> Processes(const std::vector<int>& only) const;
};

// Reads both replies, each within `deadline`. An error names the socket
// and what failed (no daemon there, or the daemon refused).
absl::StatusOr<DaemonSnapshot> TakeDaemonSnapshot(
    proto::DeviceDaemon::Stub& stub, const std::string& socket,
    absl::Duration deadline);

}  // namespace openreg::smi

#endif  // OPENREG_SMI_DAEMON_SNAPSHOT_H_
