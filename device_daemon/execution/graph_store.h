// The graphs a ReplayGraph command runs (docs/GRAPHS.md). An interface here
// so that the command executor stays below the graphs part
// (device_daemon/graphs/), which keeps and validates them; a daemon
// without a store refuses replays at their command.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_GRAPH_STORE_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_GRAPH_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/execution/op_runner.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// A graph as the daemon keeps it: the recorded commands, parsed and
// checked once at creation (graphs/graph_registry.h says what is checked).
// Immutable once created, so replays on several streams share it.
struct RecordedGraph {
  uint64_t id = 0;
  int device = 0;
  // How many generator draws each replay must pass.
  uint32_t generators = 0;
  std::vector<proto::Command> commands;
  // Indices of the commands with a graph-relative generator draw: each
  // replay runs a copy of them with this replay's draws filled in.
  std::vector<bool> draws_generators;
  uint64_t recorded_bytes = 0;  // as the client sent them

  // What the op runner kept of each recorded launch (its decoded
  // arguments), for the next replay. One replay at a time uses it (the
  // one holding `mutex`); a concurrent replay of the graph decodes as
  // usual.
  struct ReplayCache {
    absl::Mutex mutex;
    std::vector<std::unique_ptr<PreparedLaunch>> launches;
  };
  std::unique_ptr<ReplayCache> replay_cache = std::make_unique<ReplayCache>();
};

class GraphStore {
 public:
  virtual ~GraphStore() = default;

  // Graph `graph` of session `session_id`; INVALID_HANDLE naming it when
  // the session has no such graph (never created, or destroyed).
  virtual absl::StatusOr<std::shared_ptr<const RecordedGraph>> Find(
      uint64_t session_id, uint64_t graph) const = 0;

  // Session `session_id` ended: its graphs are freed (a replay running
  // holds its own reference until it ends).
  virtual void SessionClosed(uint64_t session_id) = 0;
};

// Replaces every graph-relative generator draw of `command` (a recorded
// launch) by this replay's: seed from the draw, offset = the draw's offset
// plus the recorded one. INVALID_VALUE when the replay passes fewer draws
// than the command names.
absl::Status ResolveGraphDraws(const proto::ReplayGraph& replay,
                               proto::Command* command);

// True when `command` holds a graph-relative generator draw; sets
// `*highest` to the highest generator index it names.
bool HasGraphDraws(const proto::Command& command, uint32_t* highest);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_GRAPH_STORE_H_
