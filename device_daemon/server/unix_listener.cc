#include "device_daemon/server/unix_listener.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/base/log.h"

namespace openreg::daemon {
namespace {

// After an accept failure other than "nothing waits" (EMFILE, ENFILE,
// ENOBUFS): long enough for the condition to change, short enough that
// clients barely notice.
constexpr useconds_t kAcceptBackoffMicroseconds = 10000;

}  // namespace

UnixListener::UnixListener(const SocketDirectory* directory,
                           std::string socket_path, std::string name)
    : directory_(directory),
      socket_path_(std::move(socket_path)),
      name_(std::move(name)) {}

UnixListener::~UnixListener() { Close(); }

absl::Status UnixListener::Open() {
  // "." and the pid: unique to this daemon, hidden, and never longer than
  // the attach socket's name ("<name>.attach"), so the path fits whenever
  // the daemon's own paths do.
  const std::string binding_name = absl::StrCat(".", getpid());
  const std::string binding_path =
      absl::StrCat(directory_->path(), "/", binding_name);
  absl::Status cleared = directory_->RemoveStaleSocket(binding_name);
  if (!cleared.ok()) return cleared;
  absl::StatusOr<int> listen_fd = ListenUnix(binding_path);
  if (!listen_fd.ok()) return listen_fd.status();
  absl::Status placed = directory_->RestrictSocket(binding_name, 0600);
  if (placed.ok()) {
    placed = directory_->RenameSocket(binding_name, BaseName(socket_path_));
  }
  if (!placed.ok()) {
    close(*listen_fd);
    directory_->RemoveOwnSocket(binding_name);
    return placed;
  }
  listen_fd_ = *listen_fd;
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int UnixListener::Accept() {
  while (true) {
    // Non-blocking: reads and writes never wait for the peer (and gRPC's
    // endpoints expect non-blocking sockets).
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) return fd;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      Log(LogLevel::kWarning, "accept on ", name_, ": ", std::strerror(errno));
      usleep(kAcceptBackoffMicroseconds);
    }
    return -1;
  }
}

void UnixListener::Wake() {
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void UnixListener::Close() {
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    directory_->RemoveOwnSocket(BaseName(socket_path_));
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
}

}  // namespace openreg::daemon
