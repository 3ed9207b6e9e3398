// Finding, starting and attaching to openreg-daemon: the version handshake
// over gRPC, then the attach socket that hands over the session's shared
// memory. Produces everything a Session needs; holds no global state.
#ifndef OPENREG_RUNTIME_CLIENT_CONNECTION_H_
#define OPENREG_RUNTIME_CLIENT_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data_plane/shared_memory.h"
#include "data_plane/unique_fd.h"
#include "protos/control.grpc.pb.h"
#include "protos/control.pb.h"

namespace openreg::client {

// Control-plane RPCs are small and served at once; a daemon that does not
// answer within these is treated as unavailable instead of hanging a call.
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(5);
inline constexpr absl::Duration kHandshakeDeadline = absl::Seconds(5);
// How long a client waits for a daemon it started (or one another client
// started at the same time) to answer.
inline constexpr absl::Duration kAutospawnWait = absl::Seconds(15);

// An attached session, ready to be used.
struct Connection {
  std::string socket_path;
  std::unique_ptr<proto::DeviceDaemon::Stub> stub;
  proto::HandshakeReply handshake;
  proto::SessionRef session;
  // Open for the session's lifetime: closing it detaches, its hang-up means
  // the daemon died.
  UniqueFd attach_socket;
  // The session segment; its header has been validated.
  SharedMemory segment;
  // The daemon's doorbell page (data_plane/doorbell.h), shared by every
  // client, and this session's ring fd of each device (indexed by device):
  // rung after a command for a parked stream of that device.
  SharedMemory doorbells;
  std::vector<UniqueFd> ring_fds;
};

// Connects to the daemon on ResolveSocketPath(), starting one first when
// nothing answers and autospawn is allowed. Errors carry kDaemonUnavailable,
// kVersionMismatch or the daemon's attach refusal (kPermissionDenied,
// kResourceExhausted, ...), each with a message that says what to do.
absl::StatusOr<Connection> ConnectToDaemon();

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_CONNECTION_H_
