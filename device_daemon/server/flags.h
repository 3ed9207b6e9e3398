// Command-line flags of openreg-daemon and their translation into
// DaemonOptions.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_FLAGS_H_
#define OPENREG_DEVICE_DAEMON_SERVER_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "device_daemon/base/log.h"
#include "device_daemon/base/openmp_wait_policy.h"
#include "device_daemon/server/daemon.h"

namespace openreg::daemon {

// A flag value such as "2GiB" (see ParseByteSize), parsed when the command
// line is, so that a bad value is reported like any other flag error.
struct ByteSizeFlag {
  uint64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSizeFlag* flag,
                   std::string* error);
std::string AbslUnparseFlag(const ByteSizeFlag& flag);

// --kernel_library, which may be given several times: Abseil parses every
// occurrence into a fresh value, so each parse appends to a process-wide
// list and the flag's value is that list (in command-line order).
struct KernelLibrariesFlag {
  std::vector<std::string> paths;
};
bool AbslParseFlag(absl::string_view text, KernelLibrariesFlag* flag,
                   std::string* error);
std::string AbslUnparseFlag(const KernelLibrariesFlag& flag);

// Checks the parsed flags and returns the daemon's options and log level.
struct DaemonConfig {
  DaemonOptions options;
  LogLevel log_level = LogLevel::kWarning;
  std::string log_file;  // "" = stderr
  // Shared libraries with extra CPU kernels, loaded before serving.
  std::vector<std::string> kernel_libraries;
  // Most host memory one kernel may hold in the daemon (AtenOpRunner).
  uint64_t kernel_workspace_limit = 0;
  // --openmp_wait (base/openmp_wait_policy.h).
  OpenMpWait openmp_wait = OpenMpWait::kBoundedSpin;
  // --openmp_hold_cpu (base/openmp_worker_placement.h).
  bool openmp_hold_cpu = false;
  // --share_cores (kernels/core_sharing.h).
  bool share_cores = true;
};
absl::StatusOr<DaemonConfig> ConfigFromFlags();

}  // namespace openreg::daemon

ABSL_DECLARE_FLAG(int, devices);
ABSL_DECLARE_FLAG(openreg::daemon::ByteSizeFlag, memory_per_device);
ABSL_DECLARE_FLAG(std::string, socket);
ABSL_DECLARE_FLAG(int64_t, idle_exit_seconds);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, log_file);
ABSL_DECLARE_FLAG(openreg::daemon::KernelLibrariesFlag, kernel_library);
ABSL_DECLARE_FLAG(std::string, fault_plan);
ABSL_DECLARE_FLAG(bool, profile_commands);
ABSL_DECLARE_FLAG(int32_t, executors_per_device);
ABSL_DECLARE_FLAG(uint32_t, max_sessions_per_process);
ABSL_DECLARE_FLAG(uint32_t, max_sessions_per_uid);
ABSL_DECLARE_FLAG(uint32_t, max_streams_per_session);
ABSL_DECLARE_FLAG(uint32_t, max_events_per_session);
ABSL_DECLARE_FLAG(openreg::daemon::ByteSizeFlag, kernel_workspace_limit);

#endif  // OPENREG_DEVICE_DAEMON_SERVER_FLAGS_H_
