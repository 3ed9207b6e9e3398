// Runs one rank's part of a collective (a Collective ring command) and
// learns when sessions end. An interface here so that the command executor
// stays below the collectives part (device_daemon/collectives/), which
// implements it; a daemon without it refuses collectives at their call.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device_daemon/execution/stream_context.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class CollectiveRunner {
 public:
  virtual ~CollectiveRunner() = default;

  // Runs the calling rank's part of `collective` on the stream `context`
  // names: blocks (inside a BlockingRegion, within the caller's wait
  // budget) until every rank of the communicator arrived and the
  // collective ran, or it failed (mismatch, abort, deadline). Must not
  // throw.
  virtual absl::Status Run(const StreamContext& context,
                           const proto::Collective& collective) = 0;

  // Session `session_id` ended: its communicators are aborted.
  virtual void SessionClosed(uint64_t session_id) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_
