// A session's ring fd (data_plane/doorbell.h): an eventfd the client writes
// to wake an executor for a stream it un-parked. Every device's executors
// watch it while this object lives; only the session's client holds the
// other end (passed at attach), so no other client can forge, hide or
// steal its rings.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_

#include "absl/status/statusor.h"
#include "device_daemon/devices/devices.h"

namespace openreg::daemon {

class SessionRing {
 public:
  // A new eventfd, watched by every device of `devices` (which must
  // outlive it). Fails (RESOURCE_EXHAUSTED) when the daemon is out of fds.
  static absl::StatusOr<SessionRing> Create(Devices* devices);

  SessionRing(SessionRing&& other) noexcept;
  SessionRing& operator=(SessionRing&&) = delete;
  SessionRing(const SessionRing&) = delete;
  ~SessionRing();

  // For the attach welcome; stays open while this object lives.
  int fd() const { return fd_; }

 private:
  SessionRing(Devices* devices, int fd) : devices_(devices), fd_(fd) {}

  Devices* devices_;
  int fd_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_
