// What an operator may ask of the running daemon through the control
// service (openreg-ctl sessions, kill-session, drain, shutdown,
// set-idle-exit, openreg-smi's uptime): an interface so that the control
// service does not reach into the daemon that owns it. Daemon implements it.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_DAEMON_OPERATIONS_H_
#define OPENREG_DEVICE_DAEMON_SERVER_DAEMON_OPERATIONS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace openreg::daemon {

class DaemonOperations {
 public:
  virtual ~DaemonOperations() = default;

  // Ends session `session_id` as if its connection broke: its streams stop,
  // its memory is freed and its client's next call fails. Asynchronous.
  virtual void EndSession(uint64_t session_id) = 0;
  // Makes the daemon stop (its Run() returns; every session then ends).
  virtual void RequestStop() = 0;
  // The daemon exits after `limit` without an attached session (zero:
  // never).
  virtual void SetIdleExit(absl::Duration limit) = 0;
  virtual absl::Duration idle_exit() const = 0;
  // When the daemon started (openreg-smi's uptime).
  virtual absl::Time started() const = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_DAEMON_OPERATIONS_H_
