#include "device_daemon/devices/session_ring.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

absl::StatusOr<SessionRing> SessionRing::Create(Devices* devices) {
  // Built fd by fd; on failure `ring`'s destructor unwatches and closes
  // the ones made so far.
  SessionRing ring(devices, {});
  ring.fds_.reserve(devices->count());
  for (int device = 0; device < devices->count(); ++device) {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      return MakeError(
          proto::RESOURCE_EXHAUSTED,
          absl::StrCat("cannot create the session's ring fd for device ",
                       device, ": ", std::strerror(errno)));
    }
    absl::Status watched = devices->scheduler(device).WatchRing(fd);
    if (!watched.ok()) {
      close(fd);
      return MakeError(proto::RESOURCE_EXHAUSTED, watched.message());
    }
    ring.fds_.push_back(fd);
  }
  return ring;
}

SessionRing::SessionRing(SessionRing&& other) noexcept
    : devices_(other.devices_), fds_(std::exchange(other.fds_, {})) {}

SessionRing::~SessionRing() {
  for (size_t device = 0; device < fds_.size(); ++device) {
    // Unwatched before it is closed: a closed fd leaves an epoll set only
    // when no duplicate of it is left.
    devices_->scheduler(static_cast<int>(device)).UnwatchRing(fds_[device]);
    close(fds_[device]);
  }
}

}  // namespace openreg::daemon
