// The process-wide limit on how long a synchronizing call waits for a
// stream (SetSyncTimeout in openreg/runtime.h): a watchdog for hung
// devices. Read on every wait, so it is one relaxed atomic load.
#ifndef OPENREG_RUNTIME_CLIENT_SYNC_TIMEOUT_H_
#define OPENREG_RUNTIME_CLIENT_SYNC_TIMEOUT_H_

#include "absl/time/time.h"

namespace openreg::client {

// The current limit; absl::InfiniteDuration() when there is none. The
// first call reads $OPENREG_SYNC_TIMEOUT (seconds; a malformed value is
// reported on stderr once and ignored).
absl::Duration SyncTimeout();

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_SYNC_TIMEOUT_H_
