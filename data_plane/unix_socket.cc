#include "data_plane/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace openreg {
namespace {

absl::Status ErrnoError(absl::string_view what, absl::string_view path = "") {
  const int saved = errno;
  std::string message = absl::StrCat(what, path.empty() ? "" : " ", path, ": ",
                                     std::strerror(saved));
  if (saved == ENOENT || saved == ECONNREFUSED) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

absl::StatusOr<sockaddr_un> MakeAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path is longer than ",
                     sizeof(address.sun_path) - 1, " bytes: ", path));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// Takes every fd of every SCM_RIGHTS header in `message`: the first ones go
// to keep[i] while keep[i] is still -1 (i < keep_count), the rest are
// closed (a header may carry several fds; the kernel already closed those
// that did not fit in the control buffer).
void KeepOrClosePassedFds(msghdr* message, int* keep, size_t keep_count) {
  size_t next = 0;
  for (cmsghdr* header = CMSG_FIRSTHDR(message); header != nullptr;
       header = CMSG_NXTHDR(message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) {
      continue;
    }
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(header);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, data + i * sizeof(int), sizeof(int));
      while (next < keep_count && keep[next] >= 0) ++next;
      if (keep != nullptr && next < keep_count) {
        keep[next++] = fd;
      } else {
        close(fd);
      }
    }
  }
}

}  // namespace

absl::StatusOr<int> ListenUnix(const std::string& path) {
  absl::StatusOr<sockaddr_un> address = MakeAddress(path);
  if (!address.ok()) return address.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket");
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*address),
           sizeof(*address)) != 0 ||
      listen(fd, 128) != 0) {
    absl::Status status = ErrnoError("bind/listen", path);
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  absl::StatusOr<sockaddr_un> address = MakeAddress(path);
  if (!address.ok()) return address.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*address),
              sizeof(*address)) != 0) {
    absl::Status status = ErrnoError("connect", path);
    close(fd);
    return status;
  }
  return fd;
}

absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return ErrnoError("getsockopt(SO_PEERCRED)");
  }
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

absl::Status SendMessage(int socket, const void* data, size_t size,
                         int fd_to_send) {
  return SendMessage(socket, data, size, &fd_to_send, fd_to_send >= 0 ? 1 : 0);
}

absl::Status SendMessage(int socket, const void* data, size_t size,
                         const int* fds, size_t fd_count) {
  if (fd_count > kMaxPassedFds) {
    return absl::InvalidArgumentError("too many fds for one message");
  }
  iovec io{const_cast<void*>(data), size};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  if (fd_count > 0) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(header), fds, sizeof(int) * fd_count);
  }
  ssize_t sent;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return ErrnoError("sendmsg");
  if (static_cast<size_t>(sent) != size) {
    return absl::InternalError("short write on attach socket");
  }
  return absl::OkStatus();
}

absl::Status ReceiveMessage(int socket, void* data, size_t size,
                            absl::Duration timeout, int* received_fd) {
  return ReceiveMessage(socket, data, size, timeout, received_fd,
                        received_fd != nullptr ? 1 : 0);
}

absl::Status ReceiveMessage(int socket, void* data, size_t size,
                            absl::Duration timeout, int* received_fds,
                            size_t fd_count) {
  if (fd_count > kMaxPassedFds) {
    return absl::InvalidArgumentError("too many fds for one message");
  }
  for (size_t i = 0; i < fd_count; ++i) received_fds[i] = -1;
  const absl::Time deadline = absl::Now() + timeout;
  size_t received = 0;
  while (received < size) {
    pollfd poll_fd{socket, POLLIN, 0};
    const int wait_ms =
        static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (wait_ms <= 0) {
      return absl::DeadlineExceededError("no answer on attach socket");
    }
    const int ready = poll(&poll_fd, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return absl::DeadlineExceededError("no answer on attach socket");
    }
    iovec io{static_cast<char*>(data) + received, size - received};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("recvmsg");
    if (got == 0) return absl::UnavailableError("attach socket closed by peer");
    KeepOrClosePassedFds(&message, received_fds, fd_count);
    received += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReceiveAvailable(int socket, void* data, size_t size) {
  while (true) {
    iovec io{data, size};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t got =
        recvmsg(socket, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (got < 0) return ErrnoError("recvmsg");
    KeepOrClosePassedFds(&message, /*keep=*/nullptr, 0);
    if (got == 0 && size > 0) {
      return absl::UnavailableError("attach socket closed by peer");
    }
    return static_cast<size_t>(got);
  }
}

bool PeerHungUp(int socket) {
  pollfd poll_fd{socket, POLLRDHUP, 0};
  const int ready = poll(&poll_fd, 1, 0);
  return ready != 0 && (ready < 0 || (poll_fd.revents &
                                      (POLLRDHUP | POLLHUP | POLLERR)) != 0);
}

}  // namespace openreg
