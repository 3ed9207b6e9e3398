// The daemon's captured graphs (docs/GRAPHS.md), per session.
//
// Promises:
// - Create parses and checks every recorded command once: sequences 1..n
//   in order; only what a graph may hold (asynchronous launches, copies
//   with a pinned host region, device copies, memsets); generator indices
//   within the graph's count. Memory is checked again at every replay, by
//   the executor, as for any command: a graph never reaches memory its
//   session no longer holds.
// - A graph belongs to the session that created it: no other session can
//   find, replay or destroy it, and the session's end frees it.
// - Limits per session (graphs, recorded bytes) and per graph (commands)
//   are RESOURCE_EXHAUSTED naming the limit.
#ifndef OPENREG_DEVICE_DAEMON_GRAPHS_GRAPH_REGISTRY_H_
#define OPENREG_DEVICE_DAEMON_GRAPHS_GRAPH_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/execution/graph_store.h"

namespace openreg::daemon {

struct GraphLimits {
  uint32_t graphs_per_session = 4096;
  uint64_t commands_per_graph = 1 << 20;
  uint64_t recorded_bytes_per_session = uint64_t{512} << 20;
};

class GraphRegistry final : public GraphStore {
 public:
  explicit GraphRegistry(GraphLimits limits = {}) : limits_(limits) {}

  // A new graph of `session_id` on `device` from serialized commands;
  // returns its id (unique in the daemon's life, never 0).
  absl::StatusOr<uint64_t> Create(uint64_t session_id, int device,
                                  const std::vector<std::string>& commands,
                                  uint32_t generators);
  // Frees graph `graph` (a replay running keeps it until it ends).
  absl::Status Destroy(uint64_t session_id, uint64_t graph);
  // One line per recorded command: index, name, the command in text.
  absl::StatusOr<std::string> Describe(uint64_t session_id,
                                       uint64_t graph) const;
  // Graphs kept on `device`, by every session.
  uint32_t CountOnDevice(int device) const;

  // GraphStore.
  absl::StatusOr<std::shared_ptr<const RecordedGraph>> Find(
      uint64_t session_id, uint64_t graph) const override;
  void SessionClosed(uint64_t session_id) override;

 private:
  struct SessionGraphs {
    absl::flat_hash_map<uint64_t, std::shared_ptr<const RecordedGraph>> graphs;
    uint64_t recorded_bytes = 0;
  };

  const GraphLimits limits_;
  mutable absl::Mutex mutex_;
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  absl::flat_hash_map<uint64_t, SessionGraphs> sessions_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_GRAPHS_GRAPH_REGISTRY_H_
