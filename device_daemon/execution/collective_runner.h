// Runs one rank's part of a collective (a Collective ring command) and
// learns when sessions end. An interface here so that the command executor
// stays below the collectives part (device_daemon/collectives/), which
// implements it; a daemon without it refuses collectives at their call.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/execution/stream_context.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// One rank's view of a collective it issues: what fault triggers filter
// on, and the device memory its part reads and writes, which the fault
// models corrupt.
struct CollectiveView {
  std::string group;       // c10d's group name ("0"); "" until described
  std::string group_desc;  // "default_pg"
  int rank = -1;           // in the communicator
  int size = 0;
  // What this rank's part reads of its own memory (its contribution; a
  // broadcast root's buffer) and what the collective writes into it,
  // each as one 1-D tensor, or none where the part has none.
  std::vector<proto::TensorRef> contribution;
  std::vector<proto::TensorRef> delivered;
};

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

  // The view of `collective` as issued on `context`'s stream; an error
  // when Run would refuse it (unknown communicator, malformed collective).
  // Takes no memory and waits for no rank.
  virtual absl::StatusOr<CollectiveView> View(
      const StreamContext& context, const proto::Collective& collective) = 0;

  // Session `session_id` ended: its communicators are aborted.
  virtual void SessionClosed(uint64_t session_id) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_COLLECTIVE_RUNNER_H_
