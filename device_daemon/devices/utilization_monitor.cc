#include "device_daemon/devices/utilization_monitor.h"

#include <algorithm>
#include <utility>

#include "data_plane/monotonic_clock.h"

namespace openreg::daemon {

UtilizationMonitor::UtilizationMonitor(int devices,
                                       std::function<uint64_t(int)> busy_ns,
                                       absl::Duration window)
    : devices_(devices), busy_ns_(std::move(busy_ns)), window_(window) {
  absl::MutexLock lock(&mutex_);
  points_.push_back(Now());
}

UtilizationMonitor::Point UtilizationMonitor::Now() const {
  Point point;
  point.time_ns = MonotonicNanoseconds();
  point.busy_ns.reserve(static_cast<size_t>(devices_));
  for (int device = 0; device < devices_; ++device) {
    point.busy_ns.push_back(busy_ns_(device));
  }
  return point;
}

void UtilizationMonitor::Sample() {
  Point point = Now();
  const int64_t window_ns = absl::ToInt64Nanoseconds(window_);
  absl::MutexLock lock(&mutex_);
  points_.push_back(std::move(point));
  // Keep the newest point that is at least a window old (the baseline of
  // Percent) and everything after it.
  const int64_t horizon = points_.back().time_ns - window_ns;
  while (points_.size() > 1 && points_[1].time_ns <= horizon) {
    points_.pop_front();
  }
}

double UtilizationMonitor::Percent(int device) const {
  if (device < 0 || device >= devices_) return 0;
  const Point now = Now();
  const int64_t horizon = now.time_ns - absl::ToInt64Nanoseconds(window_);
  absl::MutexLock lock(&mutex_);
  // The newest point at least a window old, else the oldest there is.
  const Point* base = &points_.front();
  for (const Point& point : points_) {
    if (point.time_ns > horizon) break;
    base = &point;
  }
  const int64_t elapsed = now.time_ns - base->time_ns;
  if (elapsed <= 0) return 0;
  const uint64_t busy = now.busy_ns[device] - base->busy_ns[device];
  return std::clamp(
      100.0 * static_cast<double>(busy) / static_cast<double>(elapsed), 0.0,
      100.0);
}

}  // namespace openreg::daemon
