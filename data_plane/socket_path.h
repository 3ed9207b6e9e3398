// Where the daemon listens when nobody says otherwise: both the daemon and
// the runtime client derive the same path, so that they meet without
// configuration.
#ifndef OPENREG_DATA_PLANE_SOCKET_PATH_H_
#define OPENREG_DATA_PLANE_SOCKET_PATH_H_

#include <string>

namespace openreg {

// $XDG_RUNTIME_DIR/openreg/daemon.sock, else /tmp/openreg-$UID/daemon.sock.
std::string DefaultDaemonSocketPath();

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SOCKET_PATH_H_
