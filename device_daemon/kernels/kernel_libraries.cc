#include "device_daemon/kernels/kernel_libraries.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace openreg::daemon {

absl::Status LoadKernelLibraries(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    // Never closed: the dispatcher keeps pointers into the library for the
    // life of the process.
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* reason = dlerror();
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load --kernel_library=", path, ": ",
                       reason != nullptr ? reason : "unknown dlopen error"));
    }
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
