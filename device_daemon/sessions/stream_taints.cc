#include "device_daemon/sessions/stream_taints.h"

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

void StreamTaints::Taint(uint32_t slot, uint64_t sequence,
                         uint64_t communicator, const absl::Status& why) {
  absl::MutexLock lock(&mutex_);
  if (by_slot_.try_emplace(slot, Failure{sequence, communicator, why}).second) {
    count_.fetch_add(1, std::memory_order_release);
  }
}

absl::Status StreamTaints::Check(uint32_t slot, uint64_t sequence) const {
  if (count_.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  absl::MutexLock lock(&mutex_);
  const auto found = by_slot_.find(slot);
  if (found == by_slot_.end() || found->second.sequence > sequence) {
    return absl::OkStatus();
  }
  return MakeError(
      ErrorCodeOf(found->second.why),
      absl::StrCat(
          "waited for stream ", slot, " past command ", found->second.sequence,
          ", a collective that failed: ", found->second.why.message()));
}

std::vector<uint32_t> StreamTaints::Clear(uint64_t communicator) {
  std::vector<uint32_t> cleared;
  absl::MutexLock lock(&mutex_);
  for (auto it = by_slot_.begin(); it != by_slot_.end();) {
    if (it->second.communicator == communicator) {
      cleared.push_back(it->first);
      by_slot_.erase(it++);
      count_.fetch_sub(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
  return cleared;
}

void StreamTaints::ClearSlot(uint32_t slot) {
  absl::MutexLock lock(&mutex_);
  if (by_slot_.erase(slot) > 0) count_.fetch_sub(1, std::memory_order_release);
}

}  // namespace openreg::daemon
