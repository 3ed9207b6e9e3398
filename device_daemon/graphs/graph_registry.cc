#include "device_daemon/graphs/graph_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/execution/command_executor.h"

namespace openreg::daemon {
namespace {

// What a graph may hold: work a replay can run again with nothing of the
// capture's moment (no staging contents, no reply to a waiting client, no
// fences of frees, no rendezvous numbered per call).
absl::Status CheckRecordable(const proto::Command& command) {
  switch (command.body_case()) {
    case proto::Command::kLaunch:
      if (command.launch().synchronous()) {
        return InvalidValueError(
            "a synchronous launch (one its client waits for) cannot be "
            "recorded");
      }
      return absl::OkStatus();
    case proto::Command::kH2D:
      if (!command.h2d().has_host()) {
        return InvalidValueError(
            "a host-to-device copy through staging cannot be recorded (only "
            "copies from pinned host memory)");
      }
      return absl::OkStatus();
    case proto::Command::kD2H:
      if (!command.d2h().has_host()) {
        return InvalidValueError(
            "a device-to-host copy through staging cannot be recorded (only "
            "copies to pinned host memory)");
      }
      return absl::OkStatus();
    case proto::Command::kD2D:
    case proto::Command::kMemset:
    case proto::Command::kLaunchModule:  // the module is looked up at replay
      return absl::OkStatus();
    default:
      return InvalidValueError(
          absl::StrCat("a graph cannot record ", CommandName(command)));
  }
}

}  // namespace

absl::StatusOr<uint64_t> GraphRegistry::Create(
    uint64_t session_id, int device, const std::vector<std::string>& commands,
    uint32_t generators) {
  if (commands.size() > limits_.commands_per_graph) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("a graph holds at most ", limits_.commands_per_graph,
                     " commands, not ", commands.size()));
  }
  auto graph = std::make_shared<RecordedGraph>();
  graph->device = device;
  graph->generators = generators;
  graph->commands.resize(commands.size());
  graph->draws_generators.resize(commands.size());
  uint64_t bytes = 0;
  for (size_t index = 0; index < commands.size(); ++index) {
    proto::Command& command = graph->commands[index];
    bytes += commands[index].size();
    const std::string where = absl::StrCat("recorded command ", index + 1);
    if (!command.ParseFromString(commands[index])) {
      return InvalidValueError(absl::StrCat(where, " is malformed"));
    }
    if (command.sequence() != index + 1) {
      return InvalidValueError(absl::StrCat(
          where, " has sequence ", command.sequence(), ", not ", index + 1));
    }
    absl::Status recordable = CheckRecordable(command);
    if (!recordable.ok()) {
      return MakeError(ErrorCodeOf(recordable),
                       absl::StrCat(where, ": ", recordable.message()));
    }
    uint32_t highest = 0;
    graph->draws_generators[index] = HasGraphDraws(command, &highest);
    if (highest > generators) {
      return InvalidValueError(absl::StrCat(where, " uses generator ", highest,
                                            " of a graph that registered ",
                                            generators));
    }
  }
  absl::MutexLock lock(&mutex_);
  SessionGraphs& owned = sessions_[session_id];
  if (owned.graphs.size() >= limits_.graphs_per_session) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("a session keeps at most ", limits_.graphs_per_session,
                     " graphs (reset or delete unused ones)"));
  }
  if (bytes > limits_.recorded_bytes_per_session - owned.recorded_bytes) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("a session's graphs hold at most ",
                     limits_.recorded_bytes_per_session,
                     " bytes of recorded commands (reset or delete unused "
                     "graphs)"));
  }
  graph->id = next_id_++;
  graph->recorded_bytes = bytes;
  owned.recorded_bytes += bytes;
  const uint64_t id = graph->id;
  owned.graphs.emplace(id, std::move(graph));
  return id;
}

absl::Status GraphRegistry::Destroy(uint64_t session_id, uint64_t graph) {
  absl::MutexLock lock(&mutex_);
  auto session = sessions_.find(session_id);
  if (session == sessions_.end() || !session->second.graphs.contains(graph)) {
    return InvalidHandleError(
        absl::StrCat("graph ", graph, " is not a graph of this session"));
  }
  SessionGraphs& owned = session->second;
  owned.recorded_bytes -= owned.graphs[graph]->recorded_bytes;
  owned.graphs.erase(graph);
  if (owned.graphs.empty()) sessions_.erase(session);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RecordedGraph>> GraphRegistry::Find(
    uint64_t session_id, uint64_t graph) const {
  absl::MutexLock lock(&mutex_);
  auto session = sessions_.find(session_id);
  if (session != sessions_.end()) {
    auto found = session->second.graphs.find(graph);
    if (found != session->second.graphs.end()) return found->second;
  }
  return InvalidHandleError(absl::StrCat(
      "graph ", graph,
      " is not a graph of this session (never created, or reset)"));
}

absl::StatusOr<std::string> GraphRegistry::Describe(uint64_t session_id,
                                                    uint64_t graph) const {
  absl::StatusOr<std::shared_ptr<const RecordedGraph>> found =
      Find(session_id, graph);
  if (!found.ok()) return found.status();
  const RecordedGraph& recorded = **found;
  std::string text = absl::StrCat(
      "openreg graph ", recorded.id, " on openreg:", recorded.device, ": ",
      recorded.commands.size(), " recorded commands, ", recorded.generators,
      " generators\n");
  for (size_t index = 0; index < recorded.commands.size(); ++index) {
    const proto::Command& command = recorded.commands[index];
    absl::StrAppend(&text, index + 1, "\t", CommandName(command), "\t",
                    command.ShortDebugString(), "\n");
  }
  return text;
}

uint32_t GraphRegistry::CountOnDevice(int device) const {
  absl::MutexLock lock(&mutex_);
  uint32_t count = 0;
  for (const auto& [session, owned] : sessions_) {
    for (const auto& [id, graph] : owned.graphs) {
      if (graph->device == device) ++count;
    }
  }
  return count;
}

void GraphRegistry::SessionClosed(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  sessions_.erase(session_id);
}

}  // namespace openreg::daemon
