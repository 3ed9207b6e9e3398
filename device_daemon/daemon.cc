#include "device_daemon/daemon.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "device_daemon/byte_size.h"
#include "device_daemon/errors.h"
#include "device_daemon/log.h"
#include "device_daemon/socket_directory.h"
#include "grpcpp/grpcpp.h"

namespace openreg::daemon {
namespace {

// How often Run() re-checks the idle limit.
constexpr int kRunPollMilliseconds = 250;

void RemoveIfPresent(const std::string& path) {
  if (unlink(path.c_str()) == 0) {
    Log(LogLevel::kDebug, "removed stale ", path);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(
    const DaemonOptions& options, std::unique_ptr<OpRunner> op_runner) {
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("no socket path");
  }
  absl::Status directory = PrepareSocketDirectory(options.socket_path);
  if (!directory.ok()) return directory;
  absl::StatusOr<InstanceLock> lock =
      InstanceLock::Acquire(options.socket_path);
  if (!lock.ok()) return lock.status();
  // Holding the lock, any socket file left behind is from a dead daemon.
  RemoveIfPresent(options.socket_path);
  RemoveIfPresent(AttachSocketPath(options.socket_path));

  std::unique_ptr<Daemon> daemon(new Daemon(options, *std::move(lock)));
  absl::StatusOr<std::unique_ptr<Devices>> devices =
      Devices::Create(options.devices, options.memory_per_device);
  if (!devices.ok()) return devices.status();
  daemon->devices_ = *std::move(devices);
  daemon->op_runner_ = std::move(op_runner);
  daemon->faults_ = std::make_unique<FaultInjector>(daemon->devices_.get(),
                                                    options.profile_commands);
  absl::StatusOr<std::vector<uint32_t>> armed =
      daemon->faults_->Arm(options.fault_plan, /*session=*/nullptr);
  if (!armed.ok()) {
    return MakeError(ErrorCodeOf(armed.status()),
                     absl::StrCat("--fault_plan: ", armed.status().message()));
  }
  daemon->executor_ = std::make_unique<CommandExecutor>(
      daemon->devices_.get(), daemon->op_runner_.get());
  daemon->executor_->SetFaultHook(daemon->faults_.get());
  daemon->registry_ = std::make_unique<SessionRegistry>(
      daemon->devices_.get(), daemon->executor_.get(), options.session_limits);
  absl::Status started = daemon->StartServers();
  if (!started.ok()) return started;
  WriteLogLine(
      LogLevel::kInfo,
      absl::StrCat("serving ", daemon->devices_->count(), " devices x ",
                   FormatByteSize(daemon->devices_->memory_per_device()),
                   " on ", options.socket_path, " (pid ", getpid(), ")"));
  return daemon;
}

Daemon::Daemon(const DaemonOptions& options, InstanceLock lock)
    : options_(options), lock_(std::move(lock)) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

Daemon::~Daemon() {
  Shutdown();
  if (stop_fd_ >= 0) close(stop_fd_);
}

std::string Daemon::attach_socket_path() const {
  return AttachSocketPath(options_.socket_path);
}

absl::Status Daemon::StartServers() {
  attach_server_ =
      std::make_unique<AttachServer>(registry_.get(), attach_socket_path(),
                                     static_cast<uint32_t>(devices_->count()));
  absl::Status attach = attach_server_->Start();
  if (!attach.ok()) return attach;

  AttachServer* attach_server = attach_server_.get();
  faults_->SetDisconnectHandler([attach_server](uint64_t session_id) {
    attach_server->DropSession(session_id);
  });
  control_service_ = std::make_unique<ControlService>(
      devices_.get(), registry_.get(), faults_.get(), &exports_,
      attach_socket_path());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options_.socket_path,
                           grpc::InsecureServerCredentials());
  builder.RegisterService(control_service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot start the gRPC server on unix:", options_.socket_path));
  }
  chmod(options_.socket_path.c_str(), 0600);
  return absl::OkStatus();
}

void Daemon::Run(int signal_fd) {
  while (true) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    const int ready = poll(fds, signal_fd >= 0 ? 2 : 1, kRunPollMilliseconds);
    if (ready < 0 && errno != EINTR) {
      Log(LogLevel::kError, "poll: ", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    if (signal_fd >= 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo info;
      if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        Log(LogLevel::kInfo, "received ", strsignal(info.ssi_signo),
            ", shutting down");
        return;
      }
    }
    if (options_.idle_exit > absl::ZeroDuration() &&
        registry_->attached_count() == 0 &&
        absl::Now() - registry_->idle_since() >= options_.idle_exit) {
      Log(LogLevel::kInfo, "no client for ",
          absl::FormatDuration(options_.idle_exit), ", exiting");
      return;
    }
  }
}

void Daemon::RequestStop() {
  const uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // No new sessions, then end the existing ones: that also releases control
  // requests blocked on a session (e.g. a draining DestroyStream) so that
  // the gRPC server can finish its calls.
  if (attach_server_ != nullptr) attach_server_->Stop();
  if (registry_ != nullptr) registry_->CloseAll();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(2));
    grpc_server_->Wait();
    grpc_server_.reset();
  }
  unlink(options_.socket_path.c_str());
}

}  // namespace openreg::daemon
