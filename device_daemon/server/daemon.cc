#include "device_daemon/server/daemon.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "device_daemon/base/byte_size.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/server/control_listener.h"
#include "device_daemon/server/socket_directory.h"
#include "grpcpp/grpcpp.h"

namespace openreg::daemon {
namespace {

// How often Run() re-checks the idle limit and samples the devices'
// utilization.
constexpr int kRunPollMilliseconds = 250;

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(
    const DaemonOptions& options, std::unique_ptr<OpRunner> op_runner,
    const CollectiveRunnerFactory& make_collectives) {
  if (options.socket_path.empty()) {
    return absl::InvalidArgumentError("no socket path");
  }
  absl::StatusOr<SocketDirectory> directory =
      SocketDirectory::Open(options.socket_path);
  if (!directory.ok()) return directory.status();
  absl::StatusOr<InstanceLock> lock =
      InstanceLock::Acquire(*directory, options.socket_path);
  if (!lock.ok()) return lock.status();
  // Holding the lock, a socket of ours left behind is from a dead daemon;
  // anything else there is not ours to remove.
  for (const std::string& path :
       {options.socket_path, AttachSocketPath(options.socket_path)}) {
    absl::Status removed = directory->RemoveStaleSocket(BaseName(path));
    if (!removed.ok()) return removed;
  }

  std::unique_ptr<Daemon> daemon(
      new Daemon(options, *std::move(directory), *std::move(lock)));
  absl::StatusOr<std::unique_ptr<Devices>> devices = Devices::Create(
      options.devices, options.memory_per_device, options.executors_per_device);
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
  if (make_collectives) {
    daemon->collectives_ = make_collectives(&daemon->communicators_);
    daemon->executor_->SetCollectiveRunner(daemon->collectives_.get());
    daemon->faults_->SetCollectiveRunner(daemon->collectives_.get());
  }
  daemon->executor_->SetGraphStore(&daemon->graphs_);
  if (options.profile_costs) daemon->executor_->costs().Start();
  daemon->executor_->wait_budget().SetLimits(options.wait_limits);
  daemon->registry_ = std::make_unique<SessionRegistry>(
      daemon->devices_.get(), daemon->executor_.get(), options.session_limits,
      options.session_quota);
  absl::Status started = daemon->StartServers();
  if (!started.ok()) return started;
  WriteLogLine(
      LogLevel::kInfo,
      absl::StrCat("serving ", daemon->devices_->count(), " devices x ",
                   FormatByteSize(daemon->devices_->memory_per_device()),
                   " on ", options.socket_path, " (pid ", getpid(), ")"));
  return daemon;
}

Daemon::Daemon(const DaemonOptions& options, SocketDirectory directory,
               InstanceLock lock)
    : options_(options),
      directory_(std::move(directory)),
      lock_(std::move(lock)),
      idle_exit_(options.idle_exit) {
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
  attach_server_ = std::make_unique<AttachServer>(
      registry_.get(), &directory_, attach_socket_path(),
      static_cast<uint32_t>(devices_->count()));
  absl::Status attach = attach_server_->Start();
  if (!attach.ok()) return attach;

  AttachServer* attach_server = attach_server_.get();
  faults_->SetDisconnectHandler([attach_server](uint64_t session_id) {
    attach_server->DropSession(session_id);
  });
  control_service_ = std::make_unique<ControlService>(
      devices_.get(), registry_.get(), faults_.get(), &executor_->costs(),
      &exports_, &communicators_, &graphs_, this, attach_socket_path());
  // No listening port: control_listener_ accepts the connections and hands
  // this server only those of the daemon's uid.
  grpc::ServerBuilder builder;
  builder.RegisterService(control_service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot start the gRPC server for ", options_.socket_path));
  }
  control_listener_ = std::make_unique<ControlListener>(
      &directory_, options_.socket_path, grpc_server_.get());
  return control_listener_->Start();
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
    devices_->utilization().Sample();
    const absl::Duration idle_limit = idle_exit();
    if (idle_limit > absl::ZeroDuration() && registry_->attached_count() == 0 &&
        absl::Now() - registry_->idle_since() >= idle_limit) {
      Log(LogLevel::kInfo, "no client for ", absl::FormatDuration(idle_limit),
          ", exiting");
      return;
    }
  }
}

void Daemon::RequestStop() {
  const uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
}

void Daemon::EndSession(uint64_t session_id) {
  if (attach_server_ != nullptr) attach_server_->DropSession(session_id);
}

void Daemon::SetIdleExit(absl::Duration limit) {
  absl::MutexLock lock(&idle_exit_mutex_);
  idle_exit_ = limit;
}

absl::Duration Daemon::idle_exit() const {
  absl::MutexLock lock(&idle_exit_mutex_);
  return idle_exit_;
}

void Daemon::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // No new sessions, then end the existing ones: that also releases control
  // requests blocked on a session (e.g. a draining DestroyStream) so that
  // the gRPC server can finish its calls.
  if (attach_server_ != nullptr) attach_server_->Stop();
  if (control_listener_ != nullptr) control_listener_->Stop();
  if (registry_ != nullptr) registry_->CloseAll();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(2));
    grpc_server_->Wait();
    grpc_server_.reset();
  }
}

}  // namespace openreg::daemon
