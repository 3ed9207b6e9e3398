#include "device_daemon/sessions/activity_trace.h"

#include <utility>

namespace openreg::daemon {

void ActivityTrace::Start() {
  absl::MutexLock lock(&mutex_);
  records_.clear();
  dropped_ = 0;
  on_.store(true, std::memory_order_relaxed);
}

std::vector<proto::DeviceActivity> ActivityTrace::Stop(uint64_t* dropped) {
  absl::MutexLock lock(&mutex_);
  on_.store(false, std::memory_order_relaxed);
  *dropped = dropped_;
  dropped_ = 0;
  return std::exchange(records_, {});
}

void ActivityTrace::Record(proto::DeviceActivity activity) {
  absl::MutexLock lock(&mutex_);
  if (!on_.load(std::memory_order_relaxed)) return;
  if (records_.size() >= kMaxTracedActivities) {
    ++dropped_;
    return;
  }
  records_.push_back(std::move(activity));
}

}  // namespace openreg::daemon
