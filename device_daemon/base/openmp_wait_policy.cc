#include "device_daemon/base/openmp_wait_policy.h"

#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace openreg::daemon {
namespace {

bool PolicyIsPassive() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && strcasecmp(policy, "PASSIVE") == 0;
}

}  // namespace

void SetOpenMpWait(OpenMpWait wait, char** argv) {
  const char* spin_count = std::getenv("GOMP_SPINCOUNT");
  const std::string short_spin = std::to_string(kShortSpinCount);
  bool changed = false;
  if (wait == OpenMpWait::kBoundedSpin) {
    // Whoever set either chose how the workers wait (and the re-executed
    // daemon finds its own count here).
    if (spin_count != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) {
      return;
    }
    changed = setenv("GOMP_SPINCOUNT",
                     std::to_string(kBoundedSpinCount).c_str(),
                     /*overwrite=*/1) == 0;
  } else if (wait == OpenMpWait::kSleep) {
    if (PolicyIsPassive() && spin_count == nullptr) return;
    changed = setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1) == 0 &&
              unsetenv("GOMP_SPINCOUNT") == 0;
  } else if (wait == OpenMpWait::kShortSpin) {
    // GOMP_SPINCOUNT overrides any policy's spin; without a policy libgomp
    // still throttles it once it has more threads than cores.
    if (spin_count != nullptr && short_spin == spin_count &&
        std::getenv("OMP_WAIT_POLICY") == nullptr) {
      return;
    }
    changed = setenv("GOMP_SPINCOUNT", short_spin.c_str(),
                     /*overwrite=*/1) == 0 &&
              unsetenv("OMP_WAIT_POLICY") == 0;
  } else {
    return;
  }
  if (!changed) return;
  execv("/proc/self/exe", argv);
  const int error = errno;
  std::fprintf(stderr,
               "openreg-daemon: --openmp_wait: could not re-execute itself "
               "with its OpenMP wait policy (%s); OpenMP workers wait as the "
               "environment says\n",
               std::strerror(error));
}

}  // namespace openreg::daemon
