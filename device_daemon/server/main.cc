// openreg-daemon: owns the emulated devices and serves clients until
// SIGTERM/SIGINT (or the idle limit).
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "command_line/help_flag.h"
#include "device_daemon/base/fd_limit.h"
#include "device_daemon/base/log.h"
#include "device_daemon/base/openmp_wait_policy.h"
#include "device_daemon/base/openmp_worker_placement.h"
#include "device_daemon/collectives/collective_engine.h"
#include "device_daemon/kernels/accelerator_semantics.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/kernels/kernel_libraries.h"
#include "device_daemon/server/daemon.h"
#include "device_daemon/server/flags.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves emulated PyTorch devices to torch_openreg clients.\n"
      "Usage: openreg-daemon [--devices=N] [--memory_per_device=auto|SIZE] "
      "[--socket=PATH] [--idle_exit_seconds=S] [--log_level=LEVEL] "
      "[--log_file=PATH] "
      "[--kernel_library=PATH ...]");
  openreg::command_line::ExitIfHelpRequested(argc, argv, {"device_daemon/"},
                                             std::cout);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG: deadlock detection would run
  // on every Mutex operation of the per-command path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<openreg::daemon::DaemonConfig> config =
      openreg::daemon::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "openreg-daemon: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  // Before anything starts: this may re-execute the daemon.
  openreg::daemon::SetOpenMpWait(config->openmp_wait, argv);
  openreg::daemon::HoldExecutorsOnTheirCpus(config->openmp_hold_cpu);
  openreg::daemon::SetLogLevel(config->log_level);
  if (!config->log_file.empty()) {
    if (absl::Status opened = openreg::daemon::SetLogFile(config->log_file);
        !opened.ok()) {
      std::fprintf(stderr, "openreg-daemon: %s\n",
                   std::string(opened.message()).c_str());
      return 2;
    }
  }
  // Each session holds a ring fd per device (base/fd_limit.h).
  if (absl::StatusOr<uint64_t> fd_limit = openreg::daemon::RaiseFdLimitToHard();
      fd_limit.ok()) {
    openreg::daemon::Log(openreg::daemon::LogLevel::kDebug,
                         "open-file limit: ", *fd_limit);
  } else {
    openreg::daemon::Log(
        openreg::daemon::LogLevel::kWarning,
        "cannot raise the open-file limit: ", fd_limit.status().message());
  }
  openreg::daemon::RegisterAcceleratorSemantics();
  // Before any socket exists: a client never sees a daemon that lacks the
  // kernels it was started with, and a bad library is a startup error.
  if (absl::Status loaded =
          openreg::daemon::LoadKernelLibraries(config->kernel_libraries);
      !loaded.ok()) {
    std::fprintf(stderr, "openreg-daemon: %s\n",
                 std::string(loaded.message()).c_str());
    return 2;
  }

  // Signals are taken synchronously from a signalfd: they are blocked
  // before any thread starts, so every thread inherits the mask and no
  // async handler ever runs. A dead client's socket must not kill the
  // daemon either.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const int signal_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (signal_fd < 0) {
    std::perror("openreg-daemon: signalfd");
    return 1;
  }

  absl::StatusOr<std::unique_ptr<openreg::daemon::Daemon>> daemon =
      openreg::daemon::Daemon::Start(
          config->options,
          std::make_unique<openreg::daemon::AtenOpRunner>(
              config->kernel_workspace_limit, config->share_cores),
          [](openreg::daemon::Communicators* communicators) {
            return std::make_unique<openreg::daemon::CollectiveEngine>(
                communicators);
          });
  if (!daemon.ok()) {
    std::fprintf(stderr, "openreg-daemon: %s\n",
                 std::string(daemon.status().message()).c_str());
    return 1;
  }
  (*daemon)->Run(signal_fd);
  (*daemon)->Shutdown();
  daemon->reset();
  close(signal_fd);
  return 0;
}
