// Extension point in front of every command the daemon executes. The
// default does nothing; fault injection (failing the Nth kernel, losing a
// device, slowing a stream) plugs in here without touching the executor.
#ifndef OPENREG_DEVICE_DAEMON_FAULT_HOOK_H_
#define OPENREG_DEVICE_DAEMON_FAULT_HOOK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

class FaultHook {
 public:
  virtual ~FaultHook() = default;

  // Called on the stream's thread before `command` runs. A non-OK status
  // fails the command with that status (recorded as the stream's error)
  // instead of running it.
  virtual absl::Status BeforeCommand(const Session& session,
                                     uint32_t stream_slot,
                                     const proto::Command& command) = 0;
};

class NoFaults : public FaultHook {
 public:
  absl::Status BeforeCommand(const Session&, uint32_t,
                             const proto::Command&) override {
    return absl::OkStatus();
  }
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULT_HOOK_H_
