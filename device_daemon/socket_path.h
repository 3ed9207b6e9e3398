// Where the daemon listens. The same rule is implemented by the runtime
// client (DefaultSocketPath in runtime.h) so that both sides agree without
// configuration.
#ifndef OPENREG_DEVICE_DAEMON_SOCKET_PATH_H_
#define OPENREG_DEVICE_DAEMON_SOCKET_PATH_H_

#include <string>

#include "absl/status/status.h"

namespace openreg {

// $XDG_RUNTIME_DIR/openreg/daemon.sock, else /tmp/openreg-$UID/daemon.sock.
std::string DefaultDaemonSocketPath();

// Creates the socket's parent directory with mode 0700 when missing (one
// level: its own parent must exist). An existing directory must belong to
// this user and must not be writable by others, since whoever controls it
// could put a fake daemon socket there.
absl::Status PrepareSocketDirectory(const std::string& socket_path);

}  // namespace openreg

#endif  // OPENREG_DEVICE_DAEMON_SOCKET_PATH_H_
