#include "device_daemon/faults/fault_log.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace openreg::daemon {

void FaultLog::Append(proto::FaultRecord record) {
  absl::MutexLock lock(&mutex_);
  record.set_index(next_index_++);
  record.set_time(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  ++fired_[{record.device(), record.model()}];
  records_.push_back(std::move(record));
  if (records_.size() > capacity_) records_.pop_front();
}

std::vector<proto::FaultRecord> FaultLog::Read(uint64_t since, uint64_t* next,
                                               uint64_t* dropped) const {
  absl::MutexLock lock(&mutex_);
  std::vector<proto::FaultRecord> out;
  const uint64_t oldest = next_index_ - records_.size();
  *dropped = since < oldest ? oldest - since : 0;
  for (const proto::FaultRecord& record : records_) {
    if (record.index() >= since) out.push_back(record);
  }
  *next = next_index_;
  return out;
}

std::map<std::string, uint64_t> FaultLog::FiredOn(int device) const {
  absl::MutexLock lock(&mutex_);
  std::map<std::string, uint64_t> fired;
  for (const auto& [key, count] : fired_) {
    if (key.first == device) fired[key.second] = count;
  }
  return fired;
}

uint64_t FaultLog::CorrectedErrors(int device) const {
  absl::MutexLock lock(&mutex_);
  auto found = fired_.find({device, "corrected_error"});
  return found == fired_.end() ? 0 : found->second;
}

}  // namespace openreg::daemon
