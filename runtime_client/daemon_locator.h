// Where the client looks for the daemon and how it may start one. All of it
// comes from the environment (read at connect time, never at library load)
// plus SetDaemonBinary(), so that a process can point at a private daemon
// without code changes.
#ifndef OPENREG_RUNTIME_CLIENT_DAEMON_LOCATOR_H_
#define OPENREG_RUNTIME_CLIENT_DAEMON_LOCATOR_H_

#include <string>
#include <vector>

namespace openreg::client {

// $OPENREG_DAEMON_SOCKET, else $XDG_RUNTIME_DIR/openreg/daemon.sock, else
// /tmp/openreg-$UID/daemon.sock. The last two match the daemon's default.
std::string ResolveSocketPath();

// Remembers the binary from SetDaemonBinary(); $OPENREG_DAEMON_BINARY wins.
void SetConfiguredDaemonBinary(const std::string& path);

struct AutospawnPlan {
  // False when $OPENREG_AUTOSPAWN is "0".
  bool allowed = true;
  // Empty when no binary is known.
  std::string binary;
  // argv[1..]: --socket, --idle_exit_seconds, then $OPENREG_DAEMON_ARGS.
  std::vector<std::string> arguments;
  // <socket dir>/daemon.log receives the daemon's stderr.
  std::string log_path;
};

AutospawnPlan PlanAutospawn(const std::string& socket_path);

// The directory part of a path ("." when there is none).
std::string DirectoryOf(const std::string& path);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_DAEMON_LOCATOR_H_
