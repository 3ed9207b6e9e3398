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

}  // namespace openreg
