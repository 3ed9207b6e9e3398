// Small helpers around AF_UNIX stream sockets: the attach socket carries a
// fixed-size hello/welcome exchange, the peer's credentials (SO_PEERCRED)
// and the fds of a welcome (SCM_RIGHTS). Its hang-up tells each side
// that the other process is gone.
#ifndef OPENREG_DATA_PLANE_UNIX_SOCKET_H_
#define OPENREG_DATA_PLANE_UNIX_SOCKET_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace openreg {

// The most fds one message carries: a welcome passes 2 + one ring fd per
// device (attach_protocol.h), so this bounds the daemon's device count too.
inline constexpr size_t kMaxPassedFds = 80;

struct PeerCredentials {
  pid_t pid;
  uid_t uid;
  gid_t gid;
};

// Binds and listens on `path` (which must not exist). Returns the fd.
absl::StatusOr<int> ListenUnix(const std::string& path);

// Connects to `path`. Returns the fd.
absl::StatusOr<int> ConnectUnix(const std::string& path);

absl::StatusOr<PeerCredentials> GetPeerCredentials(int fd);

// Sends all `size` bytes, attaching `fd_to_send` when it is >= 0.
absl::Status SendMessage(int socket, const void* data, size_t size,
                         int fd_to_send = -1);
// Sends all `size` bytes with `fd_count` (at most kMaxPassedFds) fds
// attached, in order.
absl::Status SendMessage(int socket, const void* data, size_t size,
                         const int* fds, size_t fd_count);

// Receives exactly `size` bytes within `timeout`; stores a passed fd in
// *received_fd (or -1) when received_fd is not null. Every other passed fd
// is closed: a peer must not be able to make us hold descriptors.
absl::Status ReceiveMessage(int socket, void* data, size_t size,
                            absl::Duration timeout, int* received_fd = nullptr);
// The same, keeping the first `fd_count` (at most kMaxPassedFds) passed
// fds in received_fds[0..fd_count) in the order they were sent (-1 where
// none came); any further fd is closed.
absl::Status ReceiveMessage(int socket, void* data, size_t size,
                            absl::Duration timeout, int* received_fds,
                            size_t fd_count);

// One non-blocking read of up to `size` bytes. Returns the byte count (0
// when nothing is waiting), or kUnavailable when the peer has closed its
// end. Passed fds are closed: callers of this never expect one.
absl::StatusOr<size_t> ReceiveAvailable(int socket, void* data, size_t size);

// True when the peer has closed its end (or the socket failed).
bool PeerHungUp(int socket);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_UNIX_SOCKET_H_
