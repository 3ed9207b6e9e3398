#include "runtime_client/connection.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/doorbell.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "data_plane/version.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "runtime_client/daemon_locator.h"
#include "runtime_client/daemon_spawner.h"
#include "runtime_client/session_segment.h"
#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

// Upper bound on a segment size we are willing to map (the default layout
// is about 100 MiB); anything larger is a corrupt welcome.
constexpr uint64_t kMaxSegmentBytes = uint64_t{16} << 30;

// The outcome of one connection attempt. `nobody_listening` distinguishes
// "no daemon yet" (worth starting one) from a daemon that answered badly.
struct Attempt {
  absl::StatusOr<Connection> connection;
  bool nobody_listening = false;
};

Attempt Failed(absl::Status status, bool nobody_listening = false) {
  Attempt attempt{std::move(status)};
  attempt.nobody_listening = nobody_listening;
  return attempt;
}

std::chrono::system_clock::time_point DeadlineIn(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

// A fresh channel per attempt with a private subchannel pool: a channel
// that once failed to connect backs off for up to minutes, which would
// stall the retries while an autospawned daemon is coming up.
constexpr int kMaxReplyBytes = 512 << 20;

std::unique_ptr<proto::DeviceDaemon::Stub> NewStub(
    const std::string& socket_path) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A job's flight recorder traces (DumpFlightRecorder) can pass gRPC's
  // 4 MiB default.
  arguments.SetMaxReceiveMessageSize(kMaxReplyBytes);
  return proto::DeviceDaemon::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path),
                                grpc::InsecureChannelCredentials(), arguments));
}

// The daemon must run as this user: a socket answered by another uid is
// another user's daemon, or an impostor who took over the socket's folder,
// and either would see this process's tensors.
absl::Status CheckDaemonUid(int socket, const std::string& path) {
  absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(socket);
  if (!peer.ok()) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: cannot tell who serves ", path,
                                  ": ", peer.status().message()));
  }
  if (peer->uid != getuid()) {
    return MakeError(
        Error::kPermissionDenied,
        absl::StrCat("openreg: ", path, " is served by uid ", peer->uid,
                     " (pid ", peer->pid, "), not by this user (uid ", getuid(),
                     "); openreg only talks to a daemon of its own user. Set "
                     "OPENREG_DAEMON_SOCKET to a socket in a folder only you "
                     "can write, or remove ",
                     path, " if its folder is yours"));
  }
  return absl::OkStatus();
}

std::string ClientName() {
  return absl::StrCat(program_invocation_short_name, "[", getpid(), "]");
}

// Handshake: checks that the daemon speaks our protocol.
absl::Status Handshake(const std::string& socket_path, Connection* connection,
                       bool* nobody_listening) {
  connection->stub = NewStub(socket_path);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(kHandshakeDeadline));
  // The plain connect before this found a listener: a channel that is not
  // ready yet (a loaded machine) is waited for, not taken for an absent
  // daemon (gRPC's fail-fast UNAVAILABLE).
  context.set_wait_for_ready(true);
  proto::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_client_version(kOpenregVersion);
  const grpc::Status rpc =
      connection->stub->Handshake(&context, request, &connection->handshake);
  if (!rpc.ok()) {
    *nobody_listening = rpc.error_code() == grpc::StatusCode::UNAVAILABLE;
    return MakeError(
        Error::kDaemonUnavailable,
        absl::StrCat("openreg: the daemon on ", socket_path,
                     " did not answer the handshake: ", rpc.error_message()));
  }
  const proto::HandshakeReply& reply = connection->handshake;
  absl::Status status = StatusFromProto(reply.status());
  if (!status.ok()) return status;
  if (reply.protocol_version() != kProtocolVersion) {
    return MakeError(
        Error::kVersionMismatch,
        absl::StrCat("openreg: the daemon on ", socket_path, " (version ",
                     reply.daemon_version(), ") speaks protocol version ",
                     reply.protocol_version(), " but this client speaks ",
                     kProtocolVersion,
                     "; restart the daemon from the same build as the "
                     "client"));
  }
  if (reply.device_count() <= 0) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: the daemon on ", socket_path,
                                  " reported no devices"));
  }
  return absl::OkStatus();
}

// Attach: hello/welcome on the attach socket, receiving the segment's fd.
absl::Status Attach(const std::string& socket_path, Connection* connection,
                    bool* nobody_listening) {
  const std::string attach_path = connection->handshake.attach_socket().empty()
                                      ? AttachSocketPath(socket_path)
                                      : connection->handshake.attach_socket();
  absl::StatusOr<int> fd = ConnectUnix(attach_path);
  if (!fd.ok()) {
    *nobody_listening = absl::IsUnavailable(fd.status());
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: cannot attach to the daemon: ",
                                  fd.status().message()));
  }
  connection->attach_socket = UniqueFd(*fd);
  absl::Status trusted = CheckDaemonUid(*fd, attach_path);
  if (!trusted.ok()) return trusted;

  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  const std::string name = ClientName();
  std::strncpy(hello.client_name, name.c_str(), sizeof(hello.client_name) - 1);
  absl::Status sent =
      SendMessage(connection->attach_socket.get(), &hello, sizeof(hello));
  if (!sent.ok()) {
    return MakeError(
        Error::kDaemonUnavailable,
        absl::StrCat("openreg: attach to the daemon failed: ", sent.message()));
  }
  AttachWelcome welcome{};
  // As many as any daemon may pass; the welcome then says how many came.
  int received_fds[kMaxWelcomeFds];
  absl::Status received =
      ReceiveMessage(connection->attach_socket.get(), &welcome, sizeof(welcome),
                     kHandshakeDeadline, received_fds, kMaxWelcomeFds);
  std::vector<UniqueFd> passed_fds;
  passed_fds.reserve(kMaxWelcomeFds);
  for (const int fd : received_fds) passed_fds.emplace_back(fd);
  if (!received.ok()) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: attach to the daemon failed: ",
                                  received.message()));
  }
  if (welcome.magic != kAttachMagic ||
      welcome.protocol_version != kProtocolVersion) {
    return MakeError(
        Error::kVersionMismatch,
        absl::StrCat("openreg: unexpected attach answer from the daemon on ",
                     socket_path, " (protocol ", welcome.protocol_version,
                     "); restart the daemon from the same build as the "
                     "client"));
  }
  if (welcome.error_code != 0) {
    const std::string message(
        welcome.message, strnlen(welcome.message, sizeof(welcome.message)));
    proto::Status refusal;
    refusal.set_code(static_cast<proto::ErrorCode>(welcome.error_code));
    refusal.set_message(message.empty() ? "the daemon refused to attach"
                                        : message);
    return StatusFromProto(refusal);
  }
  if (welcome.device_count < 1 || welcome.device_count > kMaxDevices) {
    return MakeError(
        Error::kInternal,
        absl::StrCat("openreg: the daemon announced ", welcome.device_count,
                     " devices (1 to ", kMaxDevices, " expected)"));
  }
  const size_t expected_fds = WelcomeFdCount(welcome.device_count);
  for (size_t i = 0; i < kMaxWelcomeFds; ++i) {
    if (passed_fds[i].valid() != (i < expected_fds)) {
      return MakeError(
          Error::kInternal,
          absl::StrCat("openreg: the daemon attached without passing the "
                       "session's shared memory, its doorbell page and one "
                       "ring fd per device (",
                       expected_fds, " fds expected)"));
    }
  }
  UniqueFd memfd = std::move(passed_fds[0]);
  UniqueFd doorbell_fd = std::move(passed_fds[1]);
  if (welcome.doorbell_bytes != kDoorbellPageBytes) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon announced a doorbell "
                                  "page of ",
                                  welcome.doorbell_bytes, " bytes, expected ",
                                  kDoorbellPageBytes));
  }
  absl::StatusOr<SharedMemory> doorbells =
      SharedMemory::Map(doorbell_fd.Release(), welcome.doorbell_bytes);
  if (!doorbells.ok()) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: cannot map the daemon's doorbell "
                                  "page: ",
                                  doorbells.status().message()));
  }
  if (welcome.segment_bytes < sizeof(SessionHeader) ||
      welcome.segment_bytes > kMaxSegmentBytes) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon announced a session "
                                  "segment of ",
                                  welcome.segment_bytes, " bytes"));
  }
  absl::StatusOr<SharedMemory> segment =
      SharedMemory::Map(memfd.Release(), welcome.segment_bytes);
  if (!segment.ok()) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: cannot map the session's shared "
                                  "memory: ",
                                  segment.status().message()));
  }
  absl::Status valid =
      ValidateSessionHeader(*static_cast<const SessionHeader*>(segment->data()),
                            segment->size(), welcome.session_id);
  if (!valid.ok()) return valid;
  const uint32_t segment_devices =
      static_cast<const SessionHeader*>(segment->data())->device_count;
  if (segment_devices != welcome.device_count) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon's welcome announced ",
                                  welcome.device_count,
                                  " devices but the session segment holds ",
                                  segment_devices));
  }
  connection->segment = std::move(*segment);
  connection->doorbells = std::move(*doorbells);
  connection->ring_fds.assign(
      std::make_move_iterator(passed_fds.begin() + kWelcomeSharedFds),
      std::make_move_iterator(passed_fds.begin() + expected_fds));
  connection->session.set_session_id(welcome.session_id);
  connection->session.set_token(welcome.token);
  return absl::OkStatus();
}

Attempt TryConnect(const std::string& socket_path) {
  // A plain connect first: it tells "nobody there" (ENOENT, ECONNREFUSED)
  // apart from a daemon that is slow, without gRPC's retry machinery.
  absl::StatusOr<int> probe = ConnectUnix(socket_path);
  if (!probe.ok()) {
    return Failed(MakeError(Error::kDaemonUnavailable,
                            absl::StrCat("openreg: cannot reach the daemon: ",
                                         probe.status().message())),
                  absl::IsUnavailable(probe.status()));
  }
  absl::Status trusted = CheckDaemonUid(*probe, socket_path);
  close(*probe);
  if (!trusted.ok()) return Failed(std::move(trusted));

  Connection connection;
  connection.socket_path = socket_path;
  bool nobody_listening = false;
  absl::Status handshake =
      Handshake(socket_path, &connection, &nobody_listening);
  if (!handshake.ok()) return Failed(std::move(handshake), nobody_listening);
  absl::Status attached = Attach(socket_path, &connection, &nobody_listening);
  if (!attached.ok()) return Failed(std::move(attached), nobody_listening);
  return Attempt{std::move(connection)};
}

std::string NoDaemonMessage(const std::string& socket_path,
                            const AutospawnPlan& plan) {
  const std::string start_hint = absl::StrCat(
      "Start one with `openreg-daemon --socket=", socket_path, "`");
  if (!plan.allowed) {
    return absl::StrCat("openreg: no daemon is listening on ", socket_path,
                        ". ", start_hint,
                        " (or unset OPENREG_AUTOSPAWN=0 to let the client "
                        "start one)");
  }
  return absl::StrCat("openreg: no daemon is listening on ", socket_path,
                      " and no daemon binary is known to start one. ",
                      start_hint,
                      " (or set OPENREG_DAEMON_BINARY to let the client "
                      "start one)");
}

}  // namespace

absl::StatusOr<Connection> ConnectToDaemon() {
  const std::string socket_path = ResolveSocketPath();
  Attempt attempt = TryConnect(socket_path);
  if (attempt.connection.ok() || !attempt.nobody_listening) {
    return std::move(attempt.connection);
  }

  const AutospawnPlan plan = PlanAutospawn(socket_path);
  if (!plan.allowed || plan.binary.empty()) {
    // What the attempt saw (no socket file, a refused connect, a handshake
    // that could not start) tells a dead daemon from one still starting.
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat(NoDaemonMessage(socket_path, plan), " [",
                                  attempt.connection.status().message(), "]"));
  }
  absl::Status spawned =
      SpawnDetachedDaemon(plan.binary, plan.arguments, plan.log_path);
  if (!spawned.ok()) return spawned;

  // Another client may be starting a daemon on the same socket right now;
  // the loser exits (the winner holds the daemon's lock), so any transient
  // "unavailable" is retried until the deadline.
  const absl::Time deadline = absl::Now() + kAutospawnWait;
  absl::Duration pause = absl::Milliseconds(20);
  while (true) {
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(250));
    attempt = TryConnect(socket_path);
    if (attempt.connection.ok() ||
        ErrorOf(attempt.connection.status()) != Error::kDaemonUnavailable) {
      return std::move(attempt.connection);
    }
    if (absl::Now() >= deadline) break;
  }
  return MakeError(
      Error::kDaemonUnavailable,
      absl::StrCat("openreg: started ", plan.binary, " for ", socket_path,
                   " but it did not answer within ",
                   absl::FormatDuration(kAutospawnWait),
                   " (last error: ", attempt.connection.status().message(),
                   "); see ", plan.log_path));
}

}  // namespace openreg::client
