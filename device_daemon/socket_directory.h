// The folder of the daemon's socket: created private, refused when another
// user could replace the socket (the default path is data_plane/
// socket_path.h).
#ifndef OPENREG_DEVICE_DAEMON_SOCKET_DIRECTORY_H_
#define OPENREG_DEVICE_DAEMON_SOCKET_DIRECTORY_H_

#include <string>

#include "absl/status/status.h"

namespace openreg::daemon {

// Creates the socket's parent directory with mode 0700 when missing (one
// level: its own parent must exist). An existing directory must belong to
// this user and must not be writable by others, since whoever controls it
// could put a fake daemon socket there.
absl::Status PrepareSocketDirectory(const std::string& socket_path);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SOCKET_DIRECTORY_H_
