#include "runtime_client/daemon_liveness.h"

#include <time.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "data_plane/unix_socket.h"
#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

constexpr int64_t kProbeIntervalNs = 100'000'000;

// The coarse clock (the kernel's last tick, read from the vDSO without the
// TSC): Check() runs on every call, and a probe interval of 100 ms does
// not need the fine clock's nanoseconds.
int64_t CoarseMonotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

DaemonLiveness::DaemonLiveness(int attach_socket, std::string socket_path)
    : attach_socket_(attach_socket), socket_path_(std::move(socket_path)) {}

absl::Status DaemonLiveness::StateError(int state) const {
  if (state == kDropped) {
    return MakeError(
        Error::kDeviceLost,
        absl::StrCat("openreg: the daemon serving ", socket_path_,
                     " ended this process's session and is still running (a "
                     "disconnect fault fired, or an operator ended the "
                     "session): its device memory, streams and events are "
                     "gone; restart this process"));
  }
  if (state == kLost) {
    return MakeError(
        Error::kDeviceLost,
        absl::StrCat("openreg: the daemon serving ", socket_path_,
                     " exited (device lost); restart it and restart this "
                     "process"));
  }
  return MakeError(Error::kDaemonUnavailable,
                   "openreg: this session was shut down (Shutdown() was "
                   "called while the call was in progress)");
}

absl::Status DaemonLiveness::Check() {
  const int state = state_.load(std::memory_order_acquire);
  if (state != kAlive) return StateError(state);
  const int64_t now = CoarseMonotonicNs();
  int64_t next = next_probe_ns_.load(std::memory_order_relaxed);
  if (now < next) return absl::OkStatus();
  // One thread probes per interval; the others go on.
  if (!next_probe_ns_.compare_exchange_strong(next, now + kProbeIntervalNs,
                                              std::memory_order_relaxed)) {
    return absl::OkStatus();
  }
  return Probe();
}

absl::Status DaemonLiveness::Probe() {
  int state = state_.load(std::memory_order_acquire);
  if (state == kAlive && PeerHungUp(attach_socket_)) {
    absl::StatusOr<int> control = ConnectUnix(socket_path_);
    if (control.ok()) close(*control);
    int expected = kAlive;
    state_.compare_exchange_strong(expected, control.ok() ? kDropped : kLost,
                                   std::memory_order_acq_rel);
    state = state_.load(std::memory_order_acquire);
  }
  return state == kAlive ? absl::OkStatus() : StateError(state);
}

bool DaemonLiveness::ConfirmLost() { return !Probe().ok(); }

void DaemonLiveness::MarkDetached() {
  int expected = kAlive;
  state_.compare_exchange_strong(expected, kDetached,
                                 std::memory_order_acq_rel);
}

}  // namespace openreg::client
