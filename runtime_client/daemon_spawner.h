// Starts openreg-daemon as a detached background process when a client
// finds none (autospawn). Detached means: its own session (setsid), not a
// child of the client (double fork, so no zombie and no SIGHUP when the
// client's terminal goes away), stdin/stdout on /dev/null and stderr
// appended to a log file next to the socket.
#ifndef OPENREG_RUNTIME_CLIENT_DAEMON_SPAWNER_H_
#define OPENREG_RUNTIME_CLIENT_DAEMON_SPAWNER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace openreg::client {

// Creates the log's directory (mode 0700) when missing, then spawns
// `binary arguments...`. Returns once the intermediate child has exited;
// whether the daemon came up is for the caller to find out by connecting.
absl::Status SpawnDetachedDaemon(const std::string& binary,
                                 const std::vector<std::string>& arguments,
                                 const std::string& log_path);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_DAEMON_SPAWNER_H_
