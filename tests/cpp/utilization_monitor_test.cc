// UtilizationMonitor: the busy share of the last window, from a busy-time
// counter the test drives, over real time.
#include "device_daemon/devices/utilization_monitor.h"

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "data_plane/monotonic_clock.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

TEST(UtilizationMonitor, ADeviceBusyHalfTheTimeIsAtFiftyPercent) {
  const int64_t start = MonotonicNanoseconds();
  // Device 0 busy half of the wall time, device 1 never.
  UtilizationMonitor monitor(2, [start](int device) -> uint64_t {
    if (device == 1) return 0;
    return static_cast<uint64_t>(MonotonicNanoseconds() - start) / 2;
  });
  for (int i = 0; i < 6; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    monitor.Sample();
  }
  EXPECT_NEAR(monitor.Percent(0), 50, 2);
  EXPECT_EQ(monitor.Percent(1), 0);
}

TEST(UtilizationMonitor, WorkOlderThanTheWindowNoLongerCounts) {
  std::atomic<uint64_t> busy{0};
  UtilizationMonitor monitor(
      1, [&busy](int) { return busy.load(); }, absl::Milliseconds(200));
  busy = 150'000'000;  // 150 ms of work, all at the start
  absl::SleepFor(absl::Milliseconds(100));
  monitor.Sample();
  EXPECT_GT(monitor.Percent(0), 50);  // the daemon is younger than a window
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    monitor.Sample();
  }
  EXPECT_EQ(monitor.Percent(0), 0);
}

TEST(UtilizationMonitor, UnknownDevicesAreIdle) {
  UtilizationMonitor monitor(1, [](int) { return uint64_t{1}; });
  EXPECT_EQ(monitor.Percent(-1), 0);
  EXPECT_EQ(monitor.Percent(1), 0);
}

}  // namespace
}  // namespace openreg::daemon
