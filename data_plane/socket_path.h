// Where the daemon listens when nobody says otherwise: both the daemon and
// the runtime client derive the same path, so that they meet without
// configuration.
#ifndef OPENREG_DATA_PLANE_SOCKET_PATH_H_
#define OPENREG_DATA_PLANE_SOCKET_PATH_H_

#include <string>

namespace openreg {

// $XDG_RUNTIME_DIR/openreg/daemon.sock, else /tmp/openreg-$UID/daemon.sock.
std::string DefaultDaemonSocketPath();

// What a command-line tool talks to: `flag_value` (its --socket) if set,
// else $OPENREG_DAEMON_SOCKET, else DefaultDaemonSocketPath().
std::string DaemonSocketPath(const std::string& flag_value);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SOCKET_PATH_H_
