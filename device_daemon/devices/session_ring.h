// A session's ring fds (data_plane/doorbell.h): one eventfd per device,
// which the client writes to wake an executor of that device for a stream
// it un-parked. Only that device's executors watch it while this object
// lives, so a ring wakes no executor that could not run the stream; only
// the session's client holds the other ends (passed at attach), so no other
// client can forge, hide or steal its rings.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "device_daemon/devices/devices.h"

namespace openreg::daemon {

class SessionRing {
 public:
  // One new eventfd per device of `devices` (which must outlive it), each
  // watched by its device's executors. Fails (RESOURCE_EXHAUSTED) when the
  // daemon is out of fds.
  static absl::StatusOr<SessionRing> Create(Devices* devices);

  SessionRing(SessionRing&& other) noexcept;
  SessionRing& operator=(SessionRing&&) = delete;
  SessionRing(const SessionRing&) = delete;
  ~SessionRing();

  // The ring fd of `device` (in [0, device count)); stays open while this
  // object lives.
  int fd(int device) const { return fds_[device]; }
  // Every device's, device 0 first: for the attach welcome.
  const std::vector<int>& fds() const { return fds_; }

 private:
  SessionRing(Devices* devices, std::vector<int> fds)
      : devices_(devices), fds_(std::move(fds)) {}

  Devices* devices_;
  std::vector<int> fds_;  // empty once moved from
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_SESSION_RING_H_
