// The gRPC control socket, accepted by the daemon itself rather than by
// gRPC, so that every control RPC is answered only for the daemon's uid.
//
// gRPC 1.51 tells a unix-socket call nothing about its caller: the peer
// string is the socket path, the AuthContext of insecure (or local)
// credentials carries no uid, and an AuthMetadataProcessor never runs for
// them. So each connection's SO_PEERCRED is read here when it is accepted,
// and the connection is handed (grpc::AddInsecureChannelFromFd) to one of
// two servers: the control service when the peer has the daemon's uid, a
// server that answers every method PERMISSION_DENIED otherwise. A
// connection never changes servers, so every RPC — with or without a
// session, present or added later — is covered, and the session tokens
// stay a second check within the uid.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_CONTROL_LISTENER_H_
#define OPENREG_DEVICE_DAEMON_SERVER_CONTROL_LISTENER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "device_daemon/server/socket_directory.h"
#include "device_daemon/server/unix_listener.h"

namespace grpc {
class CallbackGenericService;
class Server;
}  // namespace grpc

namespace openreg::daemon {

// The answer another uid gets: names both uids and what to do instead.
std::string ForeignUidMessage(uid_t peer_uid, uid_t daemon_uid,
                              const std::string& socket_path);

class ControlListener {
 public:
  // `control` (started with no listening port) and `directory` must
  // outlive the listener.
  ControlListener(const SocketDirectory* directory, std::string socket_path,
                  grpc::Server* control);
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;
  ~ControlListener();  // Stop()

  // Listens on `socket_path` (which must not exist; mode 0600), starts the
  // refusing server and the accept thread.
  absl::Status Start();
  // Stops accepting, removes the socket file and ends the refusing server's
  // connections. The control server is the caller's to shut down.
  void Stop();

 private:
  void Loop();
  void AcceptAll();

  grpc::Server* const control_;
  const uid_t daemon_uid_;
  UnixListener listener_;
  std::unique_ptr<grpc::CallbackGenericService> refusal_service_;
  std::unique_ptr<grpc::Server> refusing_;
  std::thread thread_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_CONTROL_LISTENER_H_
