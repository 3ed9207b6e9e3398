#include "device_daemon/server/instance_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace openreg::daemon {

absl::StatusOr<InstanceLock> InstanceLock::Acquire(
    const SocketDirectory& directory, const std::string& socket_path) {
  const std::string name = BaseName(socket_path) + ".lock";
  const std::string path = socket_path + ".lock";
  const int fd =
      openat(directory.fd(), name.c_str(),
             O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::PermissionDeniedError(absl::StrCat(
          path,
          " is a symbolic link; the daemon never writes through one: remove "
          "it, or choose another --socket"));
    }
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) ||
      info.st_uid != getuid() || info.st_nlink != 1) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is not a regular file of uid ", getuid(),
        " with a single link; the daemon does not write into it: remove it, "
        "or choose another --socket"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    char text[32] = {};
    const ssize_t got = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    if (saved != EWOULDBLOCK) {
      return absl::InternalError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(saved)));
    }
    int pid = 0;
    const bool known =
        got > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid);
    return absl::AlreadyExistsError(absl::StrCat(
        "another daemon (pid ", known ? absl::StrCat(pid) : "unknown",
        ") already serves ", socket_path));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) !=
                                   static_cast<ssize_t>(pid.size())) {
    const absl::Status status = absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    close(fd);
    return status;
  }
  return InstanceLock(fd);
}

InstanceLock::InstanceLock(InstanceLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

InstanceLock& InstanceLock::operator=(InstanceLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

InstanceLock::~InstanceLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace openreg::daemon
