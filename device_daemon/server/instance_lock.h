// At most one daemon per socket path: an exclusive flock on
// "<socket>.lock", held for the daemon's lifetime, with the owner's pid
// written into the file so that a second daemon can say who is in the way.
// The kernel drops the lock when the process dies, so a crashed daemon
// never blocks the next one.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_INSTANCE_LOCK_H_
#define OPENREG_DEVICE_DAEMON_SERVER_INSTANCE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"
#include "device_daemon/server/socket_directory.h"

namespace openreg::daemon {

class InstanceLock {
 public:
  // Takes the lock for `socket_path` without waiting. When another process
  // holds it: kAlreadyExists with "another daemon (pid N) already serves
  // <socket_path>". The file is opened in `directory` without following a
  // symlink, and must be a regular file of this user with one link, so
  // that the pid written into it never lands in someone else's file.
  static absl::StatusOr<InstanceLock> Acquire(const SocketDirectory& directory,
                                              const std::string& socket_path);

  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&& other) noexcept;
  InstanceLock(const InstanceLock&) = delete;
  InstanceLock& operator=(const InstanceLock&) = delete;
  ~InstanceLock();  // releases the lock (the file stays)

 private:
  explicit InstanceLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_INSTANCE_LOCK_H_
