#include "device_daemon/server/flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data_plane/device_address.h"
#include "data_plane/fault_plan.h"
#include "data_plane/session_layout.h"
#include "data_plane/socket_path.h"
#include "device_daemon/base/byte_size.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/server/auto_memory_size.h"
#include "device_daemon/server/daemon.h"
#include "device_daemon/sessions/session_registry.h"

ABSL_FLAG(int, devices, openreg::daemon::DaemonOptions().devices,
          "Number of emulated devices (1 to 64).");
ABSL_FLAG(openreg::daemon::ByteSizeFlag, memory_per_device, {},
          "Memory of each device: bytes or a size with a binary unit "
          "(K, M, G, T, KiB, MiB, GiB, TiB), e.g. 2GiB; auto: half the "
          "host's physical memory shared by the devices, at least 2GiB and "
          "at most 16GiB each. Reserved, not committed: host memory is used "
          "as tensors touch it.");
ABSL_FLAG(std::string, socket, "",
          "gRPC control socket; the attach socket is <socket>.attach. "
          "Default: $XDG_RUNTIME_DIR/openreg/daemon.sock, else "
          "/tmp/openreg-$UID/daemon.sock.");
ABSL_FLAG(int64_t, idle_exit_seconds, 0,
          "Exit after this many seconds without an attached client; 0 "
          "keeps the daemon running.");
ABSL_FLAG(std::string, openmp_wait, "bounded",
          "How the daemon's OpenMP workers wait between the parallel "
          "regions of its kernels: bounded (GOMP_SPINCOUNT=60000, a fifth "
          "of libgomp's spin, then sleep; unless the environment sets "
          "GOMP_SPINCOUNT or OMP_WAIT_POLICY, which then decide), spin "
          "(libgomp's default: milliseconds of spinning after each region, "
          "which keeps a kernel's many regions fast but takes a core from "
          "clients on a small machine), short (a spin of tens of "
          "microseconds, then sleep: the first multi-threaded kernel after "
          "an idle gap is milliseconds faster and the daemon spends less "
          "CPU) or sleep (OMP_WAIT_POLICY=PASSIVE: every region wakes its "
          "workers; docs/ARCHITECTURE.md, \"The cost of one op\", has the "
          "trade-off).");
ABSL_FLAG(bool, openmp_hold_cpu, false,
          "Hold an executor that runs multi-threaded kernels on its CPU, "
          "and its OpenMP workers off that CPU, until it idles 100 ms: the "
          "first such kernel after a short idle gap then costs ~0.3 ms "
          "instead of milliseconds on a small VM, but kernels on several "
          "streams or devices at once run 10-15% slower "
          "(base/openmp_worker_placement.h).");
ABSL_FLAG(bool, share_cores, true,
          "While a client is busy (not asleep waiting for its stream), run "
          "its launches with one intra-op thread fewer than its count where "
          "a probe of the launch's signature found the same bits at both "
          "counts, leaving the client a core (kernels/core_sharing.h). "
          "Results are CPU's bits either way; false keeps every count.");
ABSL_FLAG(std::string, log_level, "warning",
          "error, warning, info (adds each session's attach and detach, "
          "each fault fired and each error returned to a client) or "
          "debug.");
ABSL_FLAG(std::string, log_file, "",
          "Append the log to this file (each line with its UTC time) "
          "instead of writing it to stderr.");
ABSL_FLAG(openreg::daemon::KernelLibrariesFlag, kernel_library, {},
          "A shared library to dlopen at startup, before serving; its "
          "TORCH_LIBRARY / TORCH_LIBRARY_IMPL(ns, CPU, m) registrations "
          "become kernels the daemon runs for openreg tensors. Repeatable.");

ABSL_FLAG(std::string, fault_plan, "",
          "A fault plan (JSON, docs/FAULT_INJECTION.md) armed at startup. "
          "Every fault must set \"daemon_wide\": true or trigger.pid.");
ABSL_FLAG(uint32_t, max_sessions_per_process,
          openreg::daemon::SessionQuota().per_process,
          "Most sessions one client process may have attached at once "
          "(0 = no limit).");
ABSL_FLAG(uint32_t, max_sessions_per_uid,
          openreg::daemon::SessionQuota().per_uid,
          "Most sessions one user's processes may have attached at once "
          "(0 = no limit).");
ABSL_FLAG(uint32_t, max_streams_per_session,
          openreg::SessionLimits().max_streams,
          "Stream slots per session, the devices' default streams included "
          "(the client's stream pools come out of these).");
ABSL_FLAG(uint32_t, max_events_per_session, openreg::SessionLimits().max_events,
          "Event slots per session.");
ABSL_FLAG(uint32_t, max_blocked_waits_per_session,
          openreg::daemon::WaitLimits().per_session,
          "Most commands of one client process that may wait at once for "
          "other streams or interprocess events; each holds a daemon "
          "thread. A wait beyond it fails.");
ABSL_FLAG(uint32_t, max_blocked_waits, openreg::daemon::WaitLimits().total,
          "Most commands of all clients that may wait at once for other "
          "streams or interprocess events (the daemon's threads beyond its "
          "executors). A wait beyond it fails.");
ABSL_FLAG(openreg::daemon::ByteSizeFlag, kernel_workspace_limit, {},
          "Most host memory one kernel may hold inside the daemon "
          "(temporaries, results); 0 = the device's memory size.");
ABSL_FLAG(int32_t, executors_per_device,
          openreg::daemon::DaemonOptions().executors_per_device,
          "Executor threads per device: the streams of every client run on "
          "this many threads per device (reported as the device's "
          "multiprocessor count). 0 = $OPENREG_MULTIPROCESSORS, else the "
          "host's cores.");
ABSL_FLAG(bool, profile_commands, false,
          "Count every command by (device, kind, op, phase): the command "
          "profile a fault campaign samples from (openreg-ctl profile).");
ABSL_FLAG(bool, profile_costs, false,
          "Start the cost profile at once: where the daemon's time goes per "
          "op, stream and executor (openreg-ctl costs; it can also be "
          "started and stopped while the daemon runs).");

namespace openreg::daemon {

// A device needs room for at least one aligned block per stream; smaller
// values are certainly typos.
constexpr uint64_t kMinMemoryPerDevice = 1ull << 20;
// A stream slot must fit the 16 bits of an event position
// (PackEventPosition); event slots are bounded to keep a session's segment
// small.
constexpr uint32_t kMaxStreamsPerSession = 1024;
constexpr uint32_t kMaxEventsPerSession = 1 << 16;

bool AbslParseFlag(absl::string_view text, ByteSizeFlag* flag,
                   std::string* error) {
  if (text == "auto") {
    flag->bytes = 0;
    return true;
  }
  absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  flag->bytes = *bytes;
  return true;
}

std::string AbslUnparseFlag(const ByteSizeFlag& flag) {
  return flag.bytes == 0 ? "auto" : absl::StrCat(flag.bytes);
}

bool AbslParseFlag(absl::string_view text, KernelLibrariesFlag* flag,
                   std::string* /*error*/) {
  // Abseil parses the (empty) default's string form too: no library.
  if (text.empty()) {
    flag->paths.clear();
    return true;
  }
  // Leaked on purpose: trivially destructible statics only (style guide).
  static auto* occurrences = new std::vector<std::string>();
  occurrences->emplace_back(text);
  flag->paths = *occurrences;
  return true;
}

std::string AbslUnparseFlag(const KernelLibrariesFlag& flag) {
  return absl::StrJoin(flag.paths, ",");
}

absl::StatusOr<DaemonConfig> ConfigFromFlags() {
  DaemonConfig config;
  config.options.devices = absl::GetFlag(FLAGS_devices);
  if (config.options.devices < 1 || config.options.devices > kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices must be between 1 and ", kMaxDevices, ", got ",
                     config.options.devices));
  }
  config.options.memory_per_device =
      absl::GetFlag(FLAGS_memory_per_device).bytes;
  if (config.options.memory_per_device == 0) {
    config.options.memory_per_device =
        AutoMemoryPerDevice(config.options.devices, HostPhysicalMemory());
  }
  if (config.options.memory_per_device < kMinMemoryPerDevice ||
      config.options.memory_per_device > kDeviceOffsetMask) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_per_device must be between ",
                     FormatByteSize(kMinMemoryPerDevice), " and ",
                     FormatByteSize(kDeviceOffsetMask), ", got ",
                     FormatByteSize(config.options.memory_per_device)));
  }
  config.options.socket_path = absl::GetFlag(FLAGS_socket);
  if (config.options.socket_path.empty()) {
    config.options.socket_path = DefaultDaemonSocketPath();
  }
  const int64_t idle_seconds = absl::GetFlag(FLAGS_idle_exit_seconds);
  if (idle_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--idle_exit_seconds must be >= 0, got ", idle_seconds));
  }
  config.options.idle_exit = absl::Seconds(idle_seconds);
  const std::string openmp_wait = absl::GetFlag(FLAGS_openmp_wait);
  if (openmp_wait == "bounded") {
    config.openmp_wait = OpenMpWait::kBoundedSpin;
  } else if (openmp_wait == "spin") {
    config.openmp_wait = OpenMpWait::kSpin;
  } else if (openmp_wait == "short") {
    config.openmp_wait = OpenMpWait::kShortSpin;
  } else if (openmp_wait == "sleep") {
    config.openmp_wait = OpenMpWait::kSleep;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--openmp_wait must be bounded, spin, short or sleep, got '",
        openmp_wait, "'"));
  }
  config.openmp_hold_cpu = absl::GetFlag(FLAGS_openmp_hold_cpu);
  config.share_cores = absl::GetFlag(FLAGS_share_cores);
  absl::StatusOr<LogLevel> level =
      ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level: ", level.status().message()));
  }
  config.log_level = *level;
  config.log_file = absl::GetFlag(FLAGS_log_file);
  config.kernel_libraries = absl::GetFlag(FLAGS_kernel_library).paths;
  const std::string plan_path = absl::GetFlag(FLAGS_fault_plan);
  if (!plan_path.empty()) {
    absl::StatusOr<proto::FaultPlan> plan =
        faults::ReadFaultPlanFile(plan_path);
    if (!plan.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fault_plan: ", plan.status().message()));
    }
    absl::Status valid =
        faults::ValidateFaultPlan(*plan, faults::ArmedBy::kOperator);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fault_plan: ", plan_path, ": ", valid.message()));
    }
    config.options.fault_plan = *std::move(plan);
  }
  config.options.profile_commands = absl::GetFlag(FLAGS_profile_commands);
  config.options.profile_costs = absl::GetFlag(FLAGS_profile_costs);
  config.options.executors_per_device =
      absl::GetFlag(FLAGS_executors_per_device);
  if (config.options.executors_per_device < 0 ||
      config.options.executors_per_device > kMaxExecutorsPerDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--executors_per_device must be between 0 (the default) and ",
        kMaxExecutorsPerDevice, ", got ", config.options.executors_per_device));
  }
  config.options.session_quota.per_process =
      absl::GetFlag(FLAGS_max_sessions_per_process);
  config.options.session_quota.per_uid =
      absl::GetFlag(FLAGS_max_sessions_per_uid);
  SessionLimits& limits = config.options.session_limits;
  limits.max_streams = absl::GetFlag(FLAGS_max_streams_per_session);
  if (limits.max_streams < static_cast<uint32_t>(config.options.devices) + 1 ||
      limits.max_streams > kMaxStreamsPerSession) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_streams_per_session must be between ",
                     config.options.devices + 1,
                     " (a default stream per device and one "
                     "more) and ",
                     kMaxStreamsPerSession, ", got ", limits.max_streams));
  }
  limits.max_events = absl::GetFlag(FLAGS_max_events_per_session);
  if (limits.max_events < 1 || limits.max_events > kMaxEventsPerSession) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_events_per_session must be between 1 and ",
                     kMaxEventsPerSession, ", got ", limits.max_events));
  }
  config.options.wait_limits.per_session =
      absl::GetFlag(FLAGS_max_blocked_waits_per_session);
  config.options.wait_limits.total = absl::GetFlag(FLAGS_max_blocked_waits);
  if (config.options.wait_limits.per_session < 1 ||
      config.options.wait_limits.total < 1) {
    return absl::InvalidArgumentError(
        "--max_blocked_waits_per_session and --max_blocked_waits must be at "
        "least 1");
  }
  config.kernel_workspace_limit =
      absl::GetFlag(FLAGS_kernel_workspace_limit).bytes;
  if (config.kernel_workspace_limit == 0) {
    config.kernel_workspace_limit = config.options.memory_per_device;
  }
  return config;
}

}  // namespace openreg::daemon
