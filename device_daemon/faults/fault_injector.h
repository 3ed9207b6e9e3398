// The fault-injection lab's engine (docs/FAULT_INJECTION.md): armed faults
// (protos/faults.proto), checked at the executor's hook around every
// command and allocation, and what they do when they fire — corrupt what a
// command wrote or memory at rest, fail a command, make a session's error
// sticky, put a device in the FAULT or lost state, hang or slow a stream,
// drop a session, abort the daemon. Every firing is logged (FaultLog).
//
// The injector is the hook and the models that act on a command or a
// session (failures, sticky errors, device states, hangs, stragglers,
// dropped sessions, aborts); the armed faults are its FaultRegistry, the
// corruption models are tensor_corruption.h and memory_corruption.h.
//
// Thread model: BeforeCommand / AfterCommand run on executor threads (the
// after-effects of a command's firings wait in a thread-local list between
// the two calls); BeforeAllocate and the control calls on gRPC threads.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_FAULT_INJECTOR_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_FAULT_INJECTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/collective_runner.h"
#include "device_daemon/execution/fault_hook.h"
#include "device_daemon/faults/armed_fault.h"
#include "device_daemon/faults/command_facts.h"
#include "device_daemon/faults/command_profile.h"
#include "device_daemon/faults/fault_log.h"
#include "device_daemon/faults/fault_registry.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

class FaultInjector : public FaultHook {
 public:
  // `devices` must outlive the injector. With `profile_commands`, every
  // command is counted in the command profile.
  FaultInjector(Devices* devices, bool profile_commands);

  // How the Disconnect model drops a session (the attach server closes its
  // connection). Set before serving; must not block.
  void SetDisconnectHandler(std::function<void(uint64_t session_id)> handler);

  // Where collectives' facts (group, rank) and memory come from; without
  // one, collective triggers see no group or rank and corruptions of
  // collectives find nothing to corrupt. Set before serving.
  void SetCollectiveRunner(CollectiveRunner* collectives) {
    collectives_ = collectives;
  }

  // Validates every fault of `plan` and arms them all, or none. With a
  // session, unscoped faults affect only it; without one (daemon plan,
  // openreg-ctl) each fault must be daemon-wide or name a pid.
  absl::StatusOr<std::vector<uint32_t>> Arm(const proto::FaultPlan& plan,
                                            const Session* session);
  // Disarms `ids` (every fault when empty). With `session_id` != 0 only
  // that session's faults can be named (and "all" means all of its own).
  // INVALID_HANDLE names an id that is not armed (or not the session's).
  absl::StatusOr<uint32_t> Disarm(const std::vector<uint32_t>& ids,
                                  uint64_t session_id);
  std::vector<proto::ArmedFault> List() const { return registry_.List(); }
  const FaultLog& log() const { return log_; }
  bool profiling() const { return profile_commands_; }
  std::vector<proto::CommandCount> Profile() const {
    return profile_.Snapshot();
  }

  // FaultHook:
  bool active() const override {
    return active_.load(std::memory_order_acquire);
  }
  absl::Status BeforeCommand(const StreamContext& context,
                             const proto::Command& command,
                             bool* run_after) override;
  void AfterCommand(const StreamContext& context, const proto::Command& command,
                    const WrittenTensors& written, absl::Duration ran_for,
                    absl::Status* result) override;
  absl::Status BeforeAllocate(Session& session, int device,
                              uint64_t size) override;
  void SessionClosed(uint64_t session_id) override;

 private:
  // An injected out-of-memory also fails the retries the client makes for
  // the same request (after freeing cached memory), as many as these.
  struct FailingAllocation {
    int device = 0;
    uint64_t size = 0;
    int retries_left = 0;
    absl::Status error;
  };

  // The facts of `command` (with its collective's group and rank), and
  // in `view` (when not null) the collective's memory.
  CommandFacts Facts(const StreamContext& context,
                     const proto::Command& command, const std::string& name,
                     CollectiveView* view) const;

  // Acts on a firing before the command runs (null `context` and
  // `command` for an allocation; `view`: a collective's memory). Effects
  // that need the command's result go to `after`.
  absl::Status FireBefore(const Firing& firing, const CommandFacts& facts,
                          const StreamContext* context, Session& session,
                          const proto::Command* command,
                          const CollectiveView* view,
                          std::vector<Firing>* after);
  // Publishes whether anything is armed or profiled; called with `mutex_`
  // held after every change to the registry, so concurrent changes cannot
  // publish a stale answer.
  void UpdateActive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // The calling stream worker's firings whose effect follows the command:
  // filled by BeforeCommand, consumed by AfterCommand on the same thread.
  static thread_local std::vector<Firing> after_command_;

  Devices* const devices_;
  CollectiveRunner* collectives_ = nullptr;
  const bool profile_commands_;
  std::atomic<bool> active_;
  FaultLog log_;
  CommandProfile profile_;
  FaultRegistry registry_;

  mutable absl::Mutex mutex_;
  std::function<void(uint64_t)> disconnect_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, FailingAllocation> failing_allocations_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_FAULT_INJECTOR_H_
