#include "device_daemon/base/openmp_wait_policy.h"

#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace openreg::daemon {

void MakeOpenMpWorkersSleep(char** argv) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy != nullptr && strcasecmp(policy, "PASSIVE") == 0 &&
      std::getenv("GOMP_SPINCOUNT") == nullptr) {
    return;
  }
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1) != 0 ||
      unsetenv("GOMP_SPINCOUNT") != 0) {
    return;
  }
  execv("/proc/self/exe", argv);
  const int error = errno;
  std::fprintf(stderr,
               "openreg-daemon: --openmp_wait=sleep: could not re-execute "
               "itself with OMP_WAIT_POLICY=PASSIVE (%s); OpenMP workers "
               "spin between parallel regions\n",
               std::strerror(error));
}

}  // namespace openreg::daemon
