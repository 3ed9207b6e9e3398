// The daemon's record of fired faults: a bounded, append-only log read by
// index (GetFaultLog), plus per-device counters by model for statistics.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_FAULT_LOG_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_FAULT_LOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

class FaultLog {
 public:
  // Keeps the newest `capacity` records.
  explicit FaultLog(size_t capacity = 100000) : capacity_(capacity) {}

  // Stamps the record's index and time, counts it for its device and
  // model (corrected errors separately) and keeps it.
  void Append(proto::FaultRecord record);

  // Records with index >= `since`; `next` is the index after the last one
  // returned, `dropped` how many such records no longer exist.
  std::vector<proto::FaultRecord> Read(uint64_t since, uint64_t* next,
                                       uint64_t* dropped) const;

  // Faults fired on `device`, by model.
  std::map<std::string, uint64_t> FiredOn(int device) const;
  uint64_t CorrectedErrors(int device) const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mutex_;
  std::deque<proto::FaultRecord> records_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_index_ ABSL_GUARDED_BY(mutex_) = 0;
  std::map<std::pair<int, std::string>, uint64_t> fired_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_FAULT_LOG_H_
