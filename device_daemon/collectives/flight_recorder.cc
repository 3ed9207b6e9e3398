#include "device_daemon/collectives/flight_recorder.h"

#include <utility>

#include "absl/time/clock.h"

namespace openreg::daemon {

FlightRecorder::FlightRecorder(int size) : ranks_(size) {}

proto::FlightRecorderIdentity FlightRecorder::Identity(int rank) const {
  absl::MutexLock lock(&mutex_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return {};
  return ranks_[rank].identity;
}

void FlightRecorder::Describe(int rank,
                              const proto::FlightRecorderIdentity& identity) {
  absl::MutexLock lock(&mutex_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  Rank& described = ranks_[rank];
  described.described = true;
  described.identity = identity;
  while (described.entries.size() > identity.entries()) {
    described.entries.pop_front();
  }
}

std::optional<uint64_t> FlightRecorder::Started(int rank, Op op) {
  absl::MutexLock lock(&mutex_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return std::nullopt;
  Rank& recording = ranks_[rank];
  if (!recording.described || recording.identity.entries() == 0) {
    return std::nullopt;
  }
  Entry entry;
  entry.record_id = recording.recorded++;
  entry.op_id = recording.recorded;
  if (op.point_to_point) {
    entry.p2p_seq_id = ++recording.transfers;
  } else {
    entry.collective_seq_id = op.number + 1;
  }
  entry.op = std::move(op);
  entry.started_ns = absl::ToUnixNanos(absl::Now());
  if (recording.entries.size() == recording.identity.entries()) {
    recording.entries.pop_front();
  }
  recording.entries.push_back(std::move(entry));
  return recording.entries.back().record_id;
}

void FlightRecorder::Finished(int rank, uint64_t record_id,
                              const absl::Status& outcome) {
  absl::MutexLock lock(&mutex_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  std::deque<Entry>& entries = ranks_[rank].entries;
  // Recent entries finish first: search from the back.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->record_id != record_id) continue;
    it->finished_ns = absl::ToUnixNanos(absl::Now());
    it->failed = !outcome.ok();
    it->error.assign(outcome.message().data(), outcome.message().size());
    return;
  }
}

std::vector<FlightRecorder::RankRecord> FlightRecorder::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  std::vector<RankRecord> records;
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    const Rank& kept = ranks_[rank];
    if (!kept.described) continue;
    RankRecord record;
    record.rank = rank;
    record.identity = kept.identity;
    record.dropped = kept.recorded - kept.entries.size();
    record.entries.assign(kept.entries.begin(), kept.entries.end());
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace openreg::daemon
