// The flight recorder of one communicator: each rank's last collectives as
// the daemon ran them, as NCCL's flight recorder keeps a process's. The
// daemon holds every local rank's record, so a rank that died or stopped
// still has one: the dump (flight_recorder_trace.h) can show the
// collective it never joined.
//
// Contract: thread-safe. A rank records nothing until it is described
// (CommDescribe: c10d's name for its group, its global rank, how many
// entries to keep); then its last `entries` collectives are kept, the
// oldest dropped first. Started() is called when the rank's stream reaches
// a collective (the daemon's first sight of it: "started"), Finished()
// once it ran or failed. Snapshot() copies every described rank's record.
#ifndef OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_H_
#define OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "protos/control.pb.h"

namespace openreg::daemon {

class FlightRecorder {
 public:
  // One collective or transfer as a rank issued it.
  struct Op {
    std::string name;  // "all_reduce", "send", ... (c10d's names)
    bool point_to_point = false;
    int peer = -1;        // a transfer's other rank (communicator rank)
    uint64_t number = 0;  // the client's number for it (commands.proto)
    int64_t input_numel = 0;
    int64_t output_numel = 0;
    std::string dtype;  // c10's name: "Float"
  };
  struct Entry {
    uint64_t record_id = 0;          // the rank's count of records, from 0
    uint64_t collective_seq_id = 0;  // number + 1; 0 for a transfer
    uint64_t p2p_seq_id = 0;         // the rank's transfers, from 1
    uint64_t op_id = 0;              // the rank's records, from 1
    Op op;
    int64_t started_ns = 0;   // Unix time
    int64_t finished_ns = 0;  // 0 while pending
    bool failed = false;
    std::string error;
  };
  struct RankRecord {
    int rank = 0;  // in the communicator
    proto::FlightRecorderIdentity identity;
    uint64_t dropped = 0;        // entries no longer kept
    std::vector<Entry> entries;  // oldest first
  };

  explicit FlightRecorder(int size);

  void Describe(int rank, const proto::FlightRecorderIdentity& identity);
  // The record's id, or nullopt when the rank records nothing.
  std::optional<uint64_t> Started(int rank, Op op);
  void Finished(int rank, uint64_t record_id, const absl::Status& outcome);
  // How rank `rank` described itself (empty before it did).
  proto::FlightRecorderIdentity Identity(int rank) const;
  // Every described rank's record, by rank.
  std::vector<RankRecord> Snapshot() const;

 private:
  struct Rank {
    bool described = false;
    proto::FlightRecorderIdentity identity;
    std::deque<Entry> entries;
    uint64_t recorded = 0;
    uint64_t transfers = 0;
  };

  mutable absl::Mutex mutex_;
  std::vector<Rank> ranks_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_COLLECTIVES_FLIGHT_RECORDER_H_
