// The flight recorder's traces of one job in PyTorch's format: for each
// global rank, the pickle NCCL's flight recorder dumps (version 2.10 of
// its format), which `python -m torch.distributed.flight_recorder.fr_trace`
// reads unchanged. docs/DISTRIBUTED.md ("The flight recorder") lists the
// fields and what occl adds.
//
// Choices the format forces: the analyzer accepts a fixed set of backend
// names in `profiling_name`, so entries are named "nccl:<op>" (the
// semantics and format are NCCL's; `comm_lib_version` says occl); sizes are
// element counts ([[n]]), as the daemon sees the memory; `state` is NCCL's
// (the daemon sees a collective when the rank's stream reaches it:
// "started"; "completed" once it ran or failed), and the fields occl_*
// add what the format has no place for: "failed" and its error, and for a
// pending collective the global ranks the daemon saw join it.
#ifndef OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_TRACE_H_
#define OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_TRACE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "device_daemon/collectives/communicators.h"

namespace openreg::daemon {

// Global rank -> its trace, over every described rank of `job`.
std::map<int, std::string> FlightRecorderTraces(
    const std::vector<std::shared_ptr<Communicator>>& job);

// Writes each trace to <prefix><global rank>, whole or not at all.
absl::Status WriteFlightRecorderTraces(const std::map<int, std::string>& traces,
                                       const std::string& prefix);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_TRACE_H_
