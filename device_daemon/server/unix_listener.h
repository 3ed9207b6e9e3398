// A listening unix socket of the daemon (the attach socket, the control
// socket) and the eventfd that ends the one thread polling it.
//
// Open() binds the socket in the socket folder (socket_directory.h; the path
// must not exist), lets only this user connect (mode 0600; the owner checks
// SO_PEERCRED as well) and makes it non-blocking, so that accepting drains
// the backlog and then stops. The socket file appears only once it listens
// with its final mode: it is bound under a temporary name and renamed into
// place, so a client that sees the file (a readiness check, an autospawn
// wait) is never refused (ECONNREFUSED between bind and listen). The owner's
// thread polls listen_fd() and wake_fd(); wake_fd() turns readable once Wake()
// is called, and the thread must then return. Close() closes both and removes
// the socket file. Not thread-safe: Open, Wake and Close are the owner's Start
// and Stop.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_UNIX_LISTENER_H_
#define OPENREG_DEVICE_DAEMON_SERVER_UNIX_LISTENER_H_

#include <string>

#include "absl/status/status.h"
#include "device_daemon/server/socket_directory.h"

namespace openreg::daemon {

class UnixListener {
 public:
  // `directory` (the socket's folder) must outlive the listener. `name`
  // ("attach socket") names it in the log.
  UnixListener(const SocketDirectory* directory, std::string socket_path,
               std::string name);
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;
  ~UnixListener();  // Close()

  absl::Status Open();
  // The next waiting connection, non-blocking and close-on-exec; -1 when
  // none waits. Any other failure (EMFILE, say) is logged and is -1 too,
  // after a short back-off: the socket stays readable, and polling it again
  // at once would spin.
  int Accept();
  // Makes wake_fd() readable. Only after Open succeeded.
  void Wake();
  // Idempotent.
  void Close();

  const std::string& socket_path() const { return socket_path_; }
  int listen_fd() const { return listen_fd_; }
  int wake_fd() const { return wake_fd_; }

 private:
  const SocketDirectory* const directory_;
  const std::string socket_path_;
  const std::string name_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_UNIX_LISTENER_H_
