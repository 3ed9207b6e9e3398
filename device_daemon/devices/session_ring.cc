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
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) {
    return MakeError(proto::RESOURCE_EXHAUSTED,
                     absl::StrCat("cannot create the session's ring fd: ",
                                  std::strerror(errno)));
  }
  SessionRing ring(devices, fd);
  for (int device = 0; device < devices->count(); ++device) {
    absl::Status watched = devices->scheduler(device).WatchRing(fd);
    if (!watched.ok()) {
      return MakeError(proto::RESOURCE_EXHAUSTED, watched.message());
    }
  }
  return ring;
}

SessionRing::SessionRing(SessionRing&& other) noexcept
    : devices_(other.devices_), fd_(std::exchange(other.fd_, -1)) {}

SessionRing::~SessionRing() {
  if (fd_ < 0) return;
  // Unwatched before it is closed: a closed fd leaves an epoll set only
  // when no duplicate of it is left.
  for (int device = 0; device < devices_->count(); ++device) {
    devices_->scheduler(device).UnwatchRing(fd_);
  }
  close(fd_);
}

}  // namespace openreg::daemon
