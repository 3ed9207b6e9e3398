#include "device_daemon/base/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace openreg::daemon {

absl::StatusOr<uint64_t> RaiseFdLimitToHard() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  if (limit.rlim_cur == limit.rlim_max) return limit.rlim_cur;
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("setrlimit(RLIMIT_NOFILE) to ", limit.rlim_max, ": ",
                     std::strerror(errno), "; staying at ", soft));
  }
  return limit.rlim_cur;
}

}  // namespace openreg::daemon
