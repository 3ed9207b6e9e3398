// openreg-daemon as an object: the devices, the sessions, the attach
// socket and the gRPC control server, started and stopped together. main()
// adds flags and signals; tests run a Daemon in-process.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_DAEMON_H_
#define OPENREG_DEVICE_DAEMON_SERVER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_plane/session_layout.h"
#include "device_daemon/collectives/communicators.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/collective_runner.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/execution/op_runner.h"
#include "device_daemon/faults/fault_injector.h"
#include "device_daemon/graphs/graph_registry.h"
#include "device_daemon/ipc/ipc_exports.h"
#include "device_daemon/server/attach_server.h"
#include "device_daemon/server/control_listener.h"
#include "device_daemon/server/control_service.h"
#include "device_daemon/server/daemon_operations.h"
#include "device_daemon/server/instance_lock.h"
#include "device_daemon/server/socket_directory.h"
#include "device_daemon/sessions/session_registry.h"
#include "protos/faults.pb.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace openreg::daemon {

struct DaemonOptions {
  int devices = 2;
  uint64_t memory_per_device = 2ull << 30;
  std::string socket_path;  // gRPC socket; the attach socket sits next to it
  // Exit after this long without any attached session; zero = never.
  absl::Duration idle_exit = absl::ZeroDuration();
  SessionLimits session_limits;
  SessionQuota session_quota;
  // Commands that may wait at once for other streams or events
  // (--max_blocked_waits_per_session, --max_blocked_waits).
  WaitLimits wait_limits;
  // Faults armed at start (--fault_plan); each must be daemon-wide or name
  // a pid. Invalid plans make Start fail naming the bad field.
  proto::FaultPlan fault_plan;
  // Count every command in the command profile (--profile_commands).
  bool profile_commands = false;
  // Start the cost profile at once (--profile_costs).
  bool profile_costs = false;
  // Executor threads per device (--executors_per_device); 0 =
  // DefaultMultiprocessorCount().
  int executors_per_device = 0;
};

class Daemon : public DaemonOperations {
 public:
  // Takes the single-instance lock, removes stale socket files, reserves
  // device memory and starts both servers. Fails with kAlreadyExists when
  // another daemon serves the socket. `op_runner` runs the ops of every
  // session (AtenOpRunner in the real daemon). `make_collectives` makes
  // the runner of Collective commands over the daemon's communicators
  // (CollectiveEngine in the real daemon); without it, collectives fail.
  using CollectiveRunnerFactory =
      std::function<std::unique_ptr<CollectiveRunner>(Communicators*)>;
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(
      const DaemonOptions& options, std::unique_ptr<OpRunner> op_runner,
      const CollectiveRunnerFactory& make_collectives = nullptr);

  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();  // Shutdown()

  // Blocks until a signal can be read from `signal_fd` (a signalfd; -1 for
  // none), RequestStop() is called or the idle limit is reached.
  void Run(int signal_fd);
  // Makes Run() return. Thread-safe.
  void RequestStop() override;
  // DaemonOperations (openreg-ctl kill-session, set-idle-exit):
  void EndSession(uint64_t session_id) override;
  void SetIdleExit(absl::Duration limit) override;
  absl::Duration idle_exit() const override;
  absl::Time started() const override { return started_; }
  // Stops accepting clients, ends every session and removes the socket
  // files. Idempotent.
  void Shutdown();

  const std::string& socket_path() const { return options_.socket_path; }
  std::string attach_socket_path() const;
  Devices& devices() { return *devices_; }
  SessionRegistry& registry() { return *registry_; }
  CommandExecutor& executor() { return *executor_; }
  FaultInjector& faults() { return *faults_; }

 private:
  Daemon(const DaemonOptions& options, SocketDirectory directory,
         InstanceLock lock);
  absl::Status StartServers();

  const DaemonOptions options_;
  // Declared first so that they are released last, after the sockets are
  // gone: the sockets are created and removed relative to directory_.
  SocketDirectory directory_;
  InstanceLock lock_;
  int stop_fd_ = -1;  // eventfd written by RequestStop()
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<OpRunner> op_runner_;
  std::unique_ptr<FaultInjector> faults_;
  IpcExports exports_;
  // Before the executor, which runs collectives through them.
  Communicators communicators_;
  GraphRegistry graphs_;
  std::unique_ptr<CollectiveRunner> collectives_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<SessionRegistry> registry_;
  std::unique_ptr<ControlService> control_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<ControlListener> control_listener_;
  std::unique_ptr<AttachServer> attach_server_;
  bool shut_down_ = false;
  // options_.idle_exit, changed by openreg-ctl set-idle-exit.
  const absl::Time started_ = absl::Now();
  mutable absl::Mutex idle_exit_mutex_;
  absl::Duration idle_exit_ ABSL_GUARDED_BY(idle_exit_mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_DAEMON_H_
