#include "device_daemon/collectives/flight_recorder_trace.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "device_daemon/base/errors.h"
#include "torch/csrc/distributed/c10d/TraceUtils.h"

namespace openreg::daemon {
namespace {

// The format version of torch 2.13's flight recorder (FlightRecorder.hpp).
constexpr char kFormatVersion[] = "2.10";
// The analyzer accepts only known backend names (see the header).
constexpr char kBackendName[] = "nccl";

// One entry of a global rank's trace, before record ids are given.
struct TraceEntry {
  const FlightRecorder::Entry* entry = nullptr;
  const FlightRecorder::RankRecord* record = nullptr;
  const Communicator* communicator = nullptr;
  // The communicator's ranks' global ranks.
  const absl::flat_hash_map<int, int>* global_of = nullptr;
  // Global ranks that joined it, for a pending collective.
  std::vector<int> joined;
};

int GroupRank(const proto::FlightRecorderIdentity& identity, int global) {
  const auto& ranks = identity.group_ranks();
  const auto found = std::find(ranks.begin(), ranks.end(), global);
  return found == ranks.end() ? -1 : static_cast<int>(found - ranks.begin());
}

std::string ProfilingName(const TraceEntry& traced) {
  const absl::flat_hash_map<int, int>& global_of = *traced.global_of;
  const FlightRecorder::Op& op = traced.entry->op;
  std::string name = absl::StrCat(kBackendName, ":", op.name);
  if (!op.point_to_point) return name;
  // Group ranks, as NCCL writes them: "send 0->1", "recv 1<-0".
  const proto::FlightRecorderIdentity& identity = traced.record->identity;
  const int self = GroupRank(identity, identity.global_rank());
  const auto peer_global = global_of.find(op.peer);
  const int peer = peer_global == global_of.end()
                       ? -1
                       : GroupRank(identity, peer_global->second);
  if (op.name == "send") return absl::StrCat(name, " ", self, "->", peer);
  return absl::StrCat(name, " ", self, "<-", peer);
}

c10::List<c10::IValue> Sizes(int64_t numel, bool present) {
  c10::List<c10::IValue> sizes = c10d::new_list();
  if (present) {
    c10::List<c10::IValue> one = c10d::new_list();
    one.push_back(numel);
    sizes.push_back(one);
  }
  return sizes;
}

c10::List<c10::IValue> Dtypes(const std::string& dtype, bool present) {
  c10::List<c10::IValue> dtypes = c10d::new_list();
  if (present) dtypes.push_back(dtype);
  return dtypes;
}

c10::Dict<c10::IValue, c10::IValue> EntryDict(const TraceEntry& traced,
                                              int64_t record_id) {
  const FlightRecorder::Entry& entry = *traced.entry;
  const proto::FlightRecorderIdentity& identity = traced.record->identity;
  const bool finished = entry.finished_ns != 0;
  // NCCL's vocabulary: a collective that failed or timed out never
  // completed; it is retired, still "started".
  const bool completed = finished && !entry.failed;
  const bool has_data = entry.op.name != "barrier";
  int64_t pg_id = 0;
  if (!absl::SimpleAtoi(identity.group_name(), &pg_id)) pg_id = 0;
  c10::Dict<c10::IValue, c10::IValue> dict = c10d::new_dict();
  dict.insert("record_id", record_id);
  dict.insert("pg_id", pg_id);
  dict.insert("process_group",
              std::make_tuple(identity.group_name(), identity.group_desc()));
  dict.insert("thread_name", "");
  dict.insert("thread_id", "");
  dict.insert("collective_seq_id",
              static_cast<int64_t>(entry.collective_seq_id));
  dict.insert("p2p_seq_id", static_cast<int64_t>(entry.p2p_seq_id));
  dict.insert("op_id", static_cast<int64_t>(entry.op_id));
  dict.insert("profiling_name", ProfilingName(traced));
  dict.insert("time_created_ns", entry.started_ns);
  if (completed) {
    dict.insert(
        "duration_ms",
        static_cast<double>(entry.finished_ns - entry.started_ns) / 1e6);
  }
  dict.insert("input_sizes", Sizes(entry.op.input_numel, has_data));
  dict.insert("input_dtypes", Dtypes(entry.op.dtype, has_data));
  dict.insert("output_sizes", Sizes(entry.op.output_numel, has_data));
  dict.insert("output_dtypes", Dtypes(entry.op.dtype, has_data));
  dict.insert("state", completed ? "completed" : "started");
  dict.insert("time_discovered_started_ns", entry.started_ns);
  dict.insert("time_discovered_completed_ns",
              completed ? c10::IValue(entry.finished_ns) : c10::IValue());
  dict.insert("retired", finished);
  dict.insert("timeout_ms", static_cast<int64_t>(absl::ToInt64Milliseconds(
                                traced.communicator->timeout())));
  dict.insert("is_p2p", entry.op.point_to_point);
  dict.insert("frames", c10d::new_list());
  // What the format has no place for (the analyzer ignores these).
  dict.insert("occl_state",
              !finished ? "started" : (entry.failed ? "failed" : "completed"));
  dict.insert("occl_error", entry.error);
  dict.insert("occl_communicator", traced.communicator->id());
  c10::List<c10::IValue> joined = c10d::new_list();
  for (const int rank : traced.joined) joined.push_back(rank);
  dict.insert("occl_joined_ranks", joined);
  return dict;
}

// The global ranks that joined each pending collective (by its number) or
// transfer (by sender, receiver and number), from the daemon's view.
struct Joined {
  absl::flat_hash_map<uint64_t, std::vector<int>> collectives;
  absl::flat_hash_map<std::tuple<int, int, uint64_t>, std::vector<int>>
      transfers;
};

Joined JoinedRanks(const Communicator& communicator,
                   const absl::flat_hash_map<int, int>& global_of) {
  Joined joined;
  const auto global = [&global_of](int rank) {
    const auto found = global_of.find(rank);
    return found == global_of.end() ? rank : found->second;
  };
  for (const CommunicatorStats::Pending& pending :
       communicator.Stats().pending) {
    std::vector<int> ranks;
    for (const auto& [rank, since] : pending.waiting.arrived) {
      ranks.push_back(global(rank));
    }
    if (pending.transfer) {
      joined.transfers[{pending.from, pending.to, pending.waiting.sequence}] =
          std::move(ranks);
    } else {
      joined.collectives[pending.waiting.sequence] = std::move(ranks);
    }
  }
  return joined;
}

}  // namespace

std::map<int, std::string> FlightRecorderTraces(
    const std::vector<std::shared_ptr<Communicator>>& job) {
  struct RankTrace {
    std::vector<TraceEntry> entries;
    uint64_t dropped = 0;
    c10::Dict<c10::IValue, c10::IValue> pg_config = c10d::new_dict();
    c10::Dict<c10::IValue, c10::IValue> pg_status = c10d::new_dict();
  };
  // Snapshots live until the traces are pickled: entries point into them.
  std::vector<std::vector<FlightRecorder::RankRecord>> snapshots(job.size());
  // Per communicator: its ranks' global ranks.
  std::vector<absl::flat_hash_map<int, int>> globals(job.size());
  std::map<int, RankTrace> by_global;
  for (size_t c = 0; c < job.size(); ++c) {
    const Communicator& communicator = *job[c];
    snapshots[c] = communicator.recorder().Snapshot();
    for (const FlightRecorder::RankRecord& record : snapshots[c]) {
      globals[c][record.rank] = record.identity.global_rank();
    }
    const Joined joined = JoinedRanks(communicator, globals[c]);
    for (const FlightRecorder::RankRecord& record : snapshots[c]) {
      const proto::FlightRecorderIdentity& identity = record.identity;
      RankTrace& trace = by_global[identity.global_rank()];
      trace.dropped += record.dropped;
      c10::Dict<c10::IValue, c10::IValue> config = c10d::new_dict();
      config.insert("name", identity.group_name());
      config.insert("desc", identity.group_desc());
      // As c10d::ranks_str writes it ("[0, 1]"); its fmt is not exported.
      config.insert(
          "ranks",
          absl::StrCat("[", absl::StrJoin(identity.group_ranks(), ", "), "]"));
      trace.pg_config.insert(identity.group_name(), config);
      int64_t last_started = -1;
      int64_t last_completed = -1;
      for (const FlightRecorder::Entry& entry : record.entries) {
        TraceEntry traced{&entry, &record, &communicator, &globals[c], {}};
        const FlightRecorder::Op& op = entry.op;
        if (entry.finished_ns == 0 && op.point_to_point) {
          const bool sends = op.name == "send";
          const auto found =
              joined.transfers.find({sends ? record.rank : op.peer,
                                     sends ? op.peer : record.rank, op.number});
          if (found != joined.transfers.end()) traced.joined = found->second;
        } else if (entry.finished_ns == 0) {
          const auto found = joined.collectives.find(op.number);
          if (found != joined.collectives.end()) traced.joined = found->second;
        }
        if (!op.point_to_point) {
          const auto seq = static_cast<int64_t>(entry.collective_seq_id);
          last_started = std::max(last_started, seq);
          if (entry.finished_ns != 0 && !entry.failed) {
            last_completed = std::max(last_completed, seq);
          }
        }
        trace.entries.push_back(std::move(traced));
      }
      c10::Dict<c10::IValue, c10::IValue> status = c10d::new_dict();
      status.insert("last_enqueued_collective", last_started);
      status.insert("last_started_collective", last_started);
      status.insert("last_completed_collective", last_completed);
      trace.pg_status.insert(identity.group_name(), status);
    }
  }
  std::map<int, std::string> traces;
  for (auto& [global, trace] : by_global) {
    std::stable_sort(trace.entries.begin(), trace.entries.end(),
                     [](const TraceEntry& a, const TraceEntry& b) {
                       return a.entry->started_ns < b.entry->started_ns;
                     });
    c10::List<c10::IValue> entries = c10d::new_list();
    for (size_t i = 0; i < trace.entries.size(); ++i) {
      entries.push_back(
          EntryDict(trace.entries[i], static_cast<int64_t>(trace.dropped + i)));
    }
    c10::Dict<c10::IValue, c10::IValue> dump = c10d::new_dict();
    dump.insert("version", kFormatVersion);
    dump.insert("pg_config", trace.pg_config);
    dump.insert("comm_lib_version", "occl (openreg)");
    dump.insert("pg_status", trace.pg_status);
    dump.insert("entries", entries);
    traces[global] = c10d::pickle_str(dump);
  }
  return traces;
}

absl::Status WriteFlightRecorderTraces(const std::map<int, std::string>& traces,
                                       const std::string& prefix) {
  for (const auto& [global, trace] : traces) {
    const std::string path = absl::StrCat(prefix, global);
    const std::string partial = absl::StrCat(path, ".partial.", getpid());
    std::FILE* file = std::fopen(partial.c_str(), "wb");
    if (file == nullptr) {
      return InvalidValueError(
          absl::StrCat("cannot write the flight recorder's trace to ", partial,
                       " (check TORCH_FR_DUMP_TEMP_FILE)"));
    }
    const bool written =
        std::fwrite(trace.data(), 1, trace.size(), file) == trace.size();
    const bool closed = std::fclose(file) == 0;
    if (!written || !closed ||
        std::rename(partial.c_str(), path.c_str()) != 0) {
      std::remove(partial.c_str());
      return InvalidValueError(absl::StrCat(
          "could not write the flight recorder's trace to ", path));
    }
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
