// A session's ring fds: one per device, each watched by its device's
// executors only, so that a client ringing for a stream of one device does
// not wake the idle executors of the others.
#include "device_daemon/devices/session_ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/sessions/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int kDevices = 3;

// Sleeps of a device's executors that a ring (not the periodic check)
// ended.
uint64_t WokenSleeps(Devices& devices, int device) {
  uint64_t woken = 0;
  for (const DeviceScheduler::ExecutorStats& executor :
       devices.scheduler(device).ExecutorSnapshot()) {
    woken += executor.sleeps - executor.timeouts;
  }
  return woken;
}

void Ring(int ring_fd) {
  const uint64_t one = 1;
  ASSERT_EQ(write(ring_fd, &one, sizeof(one)),
            static_cast<ssize_t>(sizeof(one)));
}

// Waits until `device`'s executors have ended more than `before` sleeps
// on a ring; false after 10 s.
bool AwaitWokenSleepsAbove(Devices& devices, int device, uint64_t before) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (WokenSleeps(devices, device) <= before) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

class SessionRingTest : public ::testing::Test {
 protected:
  SessionRingTest() {
    // One executor per device: nothing but a ring or the periodic check
    // ends its sleep once the session is attached.
    devices_ = *Devices::Create(kDevices, 16 << 20, /*executors=*/1);
    session_ = MakeTestSession(1, devices_.get(), /*executor=*/nullptr);
    absl::SleepFor(absl::Milliseconds(50));  // attach-time wakes settle
  }
  ~SessionRingTest() override {
    if (session_ != nullptr) session_->Close();
  }

  std::unique_ptr<Devices> devices_;
  std::unique_ptr<Session> session_;
};

TEST_F(SessionRingTest, HasOneDistinctOpenFdPerDevice) {
  const std::vector<int>& fds = session_->ring_fds();
  ASSERT_EQ(fds.size(), static_cast<size_t>(kDevices));
  EXPECT_EQ(std::set<int>(fds.begin(), fds.end()).size(), fds.size());
  for (int device = 0; device < kDevices; ++device) {
    EXPECT_EQ(session_->ring_fd(device), fds[device]);
    EXPECT_NE(fcntl(fds[device], F_GETFD), -1) << "device " << device;
  }
}

TEST_F(SessionRingTest, ARingWakesOnlyTheDeviceItIsFor) {
  const uint64_t device0 = WokenSleeps(*devices_, 0);
  const uint64_t device2 = WokenSleeps(*devices_, 2);
  for (int i = 0; i < 50; ++i) {
    const uint64_t device1 = WokenSleeps(*devices_, 1);
    Ring(session_->ring_fd(1));
    ASSERT_TRUE(AwaitWokenSleepsAbove(*devices_, 1, device1))
        << "ring " << i << " never woke device 1's executor";
  }
  EXPECT_EQ(WokenSleeps(*devices_, 0), device0);
  EXPECT_EQ(WokenSleeps(*devices_, 2), device2);
}

TEST_F(SessionRingTest, AClosedSessionsRingsWakeNobody) {
  // A duplicate stays open after the session closed its fds: without the
  // unwatch it would still be in device 1's epoll set.
  const int duplicate = dup(session_->ring_fd(1));
  ASSERT_GE(duplicate, 0);
  session_->Close();
  session_.reset();
  absl::SleepFor(absl::Milliseconds(50));
  const uint64_t before = WokenSleeps(*devices_, 1);
  for (int i = 0; i < 10; ++i) Ring(duplicate);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(WokenSleeps(*devices_, 1), before);
  close(duplicate);
}

}  // namespace
}  // namespace openreg::daemon
