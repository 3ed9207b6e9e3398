// Device utilization as nvidia-smi's utilization.gpu reports it: the share
// of the last sample window during which at least one executor of the
// device ran a stream (DeviceScheduler::BusyNanoseconds), measured in the
// daemon rather than estimated by a client.
//
// Contract: Sample() is called periodically (Daemon::Run, every 250 ms);
// Percent() compares the device's busy time now with the newest sample at
// least `window` old, so the figure covers the last `window` (1 s), or
// the time since the daemon started when it is younger than that. Both are
// thread-safe.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_UTILIZATION_MONITOR_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_UTILIZATION_MONITOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace openreg::daemon {

class UtilizationMonitor {
 public:
  // `busy_ns(device)` is the device's cumulative busy time; `devices` how
  // many there are.
  UtilizationMonitor(int devices, std::function<uint64_t(int)> busy_ns,
                     absl::Duration window = absl::Seconds(1));

  void Sample();
  // 0 to 100 over the last window.
  double Percent(int device) const;
  absl::Duration window() const { return window_; }

 private:
  struct Point {
    int64_t time_ns = 0;
    std::vector<uint64_t> busy_ns;  // by device
  };
  Point Now() const;

  const int devices_;
  const std::function<uint64_t(int)> busy_ns_;
  const absl::Duration window_;
  mutable absl::Mutex mutex_;
  // Oldest first; the first is always at least `window_` old once the
  // daemon is (Sample drops only points that a newer one replaces).
  std::deque<Point> points_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_UTILIZATION_MONITOR_H_
