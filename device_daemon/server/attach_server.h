// The attach socket: where a client proves who it is (SO_PEERCRED), gets
// its session and receives the session segment's fd (SCM_RIGHTS). The
// connection then stays open for the session's lifetime; its hang-up —
// clean exit, crash or kill -9 — is how the daemon learns the client is
// gone and tears the session down.
//
// One thread polls the listening socket, every connection and a wake-up
// eventfd. Nothing on it blocks on a peer: a hello is read as it arrives
// (non-blocking, however many pieces it comes in), each connection has a
// deadline for its hello, and the number of connections still owing one
// is bounded, so slow or silent peers never delay anyone else's attach.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_ATTACH_SERVER_H_
#define OPENREG_DEVICE_DAEMON_SERVER_ATTACH_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/server/socket_directory.h"
#include "device_daemon/server/unix_listener.h"
#include "device_daemon/sessions/session_registry.h"

namespace openreg::daemon {

class AttachServer {
 public:
  // `registry` and `directory` (the socket's folder) must outlive the
  // server.
  AttachServer(SessionRegistry* registry, const SocketDirectory* directory,
               std::string socket_path, uint32_t device_count);
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;
  ~AttachServer();  // Stop()

  // Listens on `socket_path` (which must not exist) and starts the thread.
  absl::Status Start();
  // Stops the thread, closes every connection and removes the socket file.
  // Sessions are not closed here (the registry owns them).
  void Stop();

  // Closes the session's connection and ends the session, as if the client
  // had hung up (the Disconnect fault model). Thread-safe and non-blocking:
  // the server's thread does it, so a stream worker of that very session
  // may ask.
  void DropSession(uint64_t session_id);

 private:
  struct Connection {
    uint64_t session_id = 0;  // 0 until attached
    absl::Time accepted;
    // Until attached: the hello received so far, and the peer once its
    // credentials were checked.
    AttachHello hello{};
    size_t hello_bytes = 0;
    bool peer_checked = false;
    PeerCredentials peer{};
  };

  void Loop();
  // Accepts every waiting connection, dropping the oldest still owing a
  // hello when there are too many.
  void Accept();
  // Checks the peer's uid (once), then reads whatever has arrived of its
  // hello; attaches when the hello is complete.
  void ReadHello(int fd);
  // Checks the complete hello and answers; keeps the connection when a
  // session was created.
  void Attach(int fd);
  void DropExpiredHellos(absl::Time now);
  void SendRefusal(int fd, int32_t error_code, const std::string& message);
  void Disconnect(int fd, const char* reason);
  void DropRequestedSessions();

  SessionRegistry* const registry_;
  const uint32_t device_count_;
  const uid_t daemon_uid_;
  UnixListener listener_;
  int drop_fd_ = -1;  // eventfd: DropSession() writes
  absl::Mutex drop_mutex_;
  std::vector<uint64_t> drop_requests_ ABSL_GUARDED_BY(drop_mutex_);
  std::thread thread_;
  std::map<int, Connection> connections_;  // only touched by the thread
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_ATTACH_SERVER_H_
