#include "data_plane/socket_path.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace openreg {

std::string DefaultDaemonSocketPath() {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] != '\0') {
    return absl::StrCat(runtime_dir, "/openreg/daemon.sock");
  }
  return absl::StrCat("/tmp/openreg-", getuid(), "/daemon.sock");
}

std::string DaemonSocketPath(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* from_environment = std::getenv("OPENREG_DAEMON_SOCKET");
  if (from_environment != nullptr && from_environment[0] != '\0') {
    return from_environment;
  }
  return DefaultDaemonSocketPath();
}

}  // namespace openreg
