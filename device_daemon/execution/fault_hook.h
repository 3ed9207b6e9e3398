// Extension point around every command the daemon executes and every
// allocation it makes: the fault injector (fault_injector.h) plugs in here
// without the executor knowing any fault model. The default does nothing.
//
// Cost contract: the executor asks `active()` (one atomic load) before
// each command and calls nothing else when it is false, so an idle hook
// costs nothing measurable on the per-op path.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_FAULT_HOOK_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_FAULT_HOOK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "device_daemon/execution/stream_context.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

// The tensors a command wrote, in output order (a kernel's outputs, the
// arguments an in-place or out= kernel wrote): what output corruption
// targets.
using WrittenTensors = std::vector<proto::TensorRef>;

class FaultHook {
 public:
  virtual ~FaultHook() = default;

  // False when no fault is armed and nothing is profiled.
  virtual bool active() const = 0;

  // Called on the stream's thread before `command` runs (only when
  // active). A non-OK status fails the command with it instead of running
  // it. May block (a hung or slow device) but must return once
  // `context.stop_requested()`. Sets `*run_after` when it needs
  // AfterCommand (collecting what a command wrote has a cost).
  virtual absl::Status BeforeCommand(const StreamContext& context,
                                     const proto::Command& command,
                                     bool* run_after) = 0;

  // Called on the same thread right after the command ran (only when
  // BeforeCommand asked for it), with what it wrote, how long it ran and
  // its result, which the hook may replace.
  virtual void AfterCommand(const StreamContext& context,
                            const proto::Command& command,
                            const WrittenTensors& written,
                            absl::Duration ran_for, absl::Status* result) = 0;

  // Called before `session` allocates `size` bytes on `device` (only when
  // active); a non-OK status refuses the allocation.
  virtual absl::Status BeforeAllocate(Session& session, int device,
                                      uint64_t size) = 0;

  // The session ended: faults scoped to it go away.
  virtual void SessionClosed(uint64_t session_id) = 0;
};

class NoFaults : public FaultHook {
 public:
  bool active() const override { return false; }
  absl::Status BeforeCommand(const StreamContext&, const proto::Command&,
                             bool*) override {
    return absl::OkStatus();
  }
  void AfterCommand(const StreamContext&, const proto::Command&,
                    const WrittenTensors&, absl::Duration,
                    absl::Status*) override {}
  absl::Status BeforeAllocate(Session&, int, uint64_t) override {
    return absl::OkStatus();
  }
  void SessionClosed(uint64_t) override {}
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_FAULT_HOOK_H_
