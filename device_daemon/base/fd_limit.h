// The daemon's open-file limit. Every attached session holds one ring fd
// per device (data_plane/doorbell.h) besides its segment and its sockets,
// so a daemon with many devices and clients needs more fds than the usual
// soft limit of 1024; the hard limit is what the administrator allows.
#ifndef OPENREG_DEVICE_DAEMON_BASE_FD_LIMIT_H_
#define OPENREG_DEVICE_DAEMON_BASE_FD_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace openreg::daemon {

// Raises the soft RLIMIT_NOFILE to the hard one. Returns the limit now in
// force.
absl::StatusOr<uint64_t> RaiseFdLimitToHard();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_FD_LIMIT_H_
