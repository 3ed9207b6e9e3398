// Knows whether the daemon behind a session is still there. The attach
// socket stays open for the session's lifetime, so its hang-up is the
// daemon's death, or the daemon ending this session while it goes on (a
// disconnect fault): the control socket still answering tells which, so
// that the error says what happened. Either way the session is lost for
// good (kDeviceLost):
// its memory, streams and events died with the daemon, and pretending
// otherwise would hand out stale device pointers.
#ifndef OPENREG_RUNTIME_CLIENT_DAEMON_LIVENESS_H_
#define OPENREG_RUNTIME_CLIENT_DAEMON_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace openreg::client {

class DaemonLiveness {
 public:
  // `attach_socket` must stay open as long as this object is used.
  DaemonLiveness(int attach_socket, std::string socket_path);

  // Cheap check for every API call: the sticky state, plus a hang-up probe
  // at most every 100 ms so that calls which never wait (LaunchOp) still
  // notice a dead daemon within a fraction of a second.
  absl::Status Check();
  // Probes the socket now; used between the slices of a wait.
  absl::Status Probe();
  // Called when an RPC could not reach the daemon: lost if the attach
  // socket hung up too, otherwise the failure was transient.
  bool ConfirmLost();
  // After Shutdown(): threads still holding the session get an error
  // instead of writing into rings nobody reads.
  void MarkDetached();
  bool lost() const {
    const int state = state_.load(std::memory_order_acquire);
    return state == kLost || state == kDropped;
  }

 private:
  enum State : int { kAlive = 0, kLost = 1, kDetached = 2, kDropped = 3 };

  absl::Status StateError(int state) const;

  const int attach_socket_;
  const std::string socket_path_;
  std::atomic<int> state_{kAlive};
  std::atomic<int64_t> next_probe_ns_{0};
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_DAEMON_LIVENESS_H_
