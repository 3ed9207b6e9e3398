// The folder of the daemon's sockets and lock file (the default path is
// data_plane/socket_path.h). Another local user who controls that folder
// could plant symlinks that the daemon follows or swap the daemon's socket
// for their own, so the folder is checked once, kept open, and every file
// in it is created or removed relative to that open folder without
// following symlinks (the rules of ssh-agent, X11 and $XDG_RUNTIME_DIR).
#ifndef OPENREG_DEVICE_DAEMON_SERVER_SOCKET_DIRECTORY_H_
#define OPENREG_DEVICE_DAEMON_SERVER_SOCKET_DIRECTORY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace openreg::daemon {

class SocketDirectory {
 public:
  // Creates the socket's parent folder with mode 0700 when missing (one
  // level: its own parent must exist) and opens it. Refused with
  // kPermissionDenied, naming the folder and what to do, when the folder
  // is a symlink, belongs to another user, or is writable by others — the
  // one exception being a sticky folder of root or this user such as /tmp,
  // where nobody can replace another user's files.
  static absl::StatusOr<SocketDirectory> Open(const std::string& socket_path);

  SocketDirectory(SocketDirectory&& other) noexcept;
  SocketDirectory& operator=(SocketDirectory&& other) noexcept;
  SocketDirectory(const SocketDirectory&) = delete;
  SocketDirectory& operator=(const SocketDirectory&) = delete;
  ~SocketDirectory();

  // The open folder, for openat()/unlinkat().
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // Removes `name` left behind by a dead daemon: only when it is a socket
  // of this user. Nothing there is fine; anything else (a symlink, a file,
  // another user's socket) is kFailedPrecondition naming it.
  absl::Status RemoveStaleSocket(const std::string& name) const;
  // Removes `name` if it is still a socket of this user (at shutdown).
  void RemoveOwnSocket(const std::string& name) const;
  // Sets a socket created by bind() to `mode` without following symlinks;
  // fails when `name` is not a socket of this user.
  absl::Status RestrictSocket(const std::string& name, int mode) const;
  // Renames socket `from` to `to` in this folder; `to` must not exist.
  absl::Status RenameSocket(const std::string& from,
                            const std::string& to) const;

 private:
  SocketDirectory(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
};

// The last path component ("daemon.sock" of "/tmp/openreg-0/daemon.sock").
std::string BaseName(const std::string& path);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_SOCKET_DIRECTORY_H_
