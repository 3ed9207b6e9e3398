// The runtime client when its daemon dies: every call fails with
// kDeviceLost within a few seconds, nothing hangs or crashes, and a new
// session can be attached after Shutdown().
#include <signal.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

class DeviceLostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    UseSocket(socket_);
    absl::Status started =
        daemon_.Start(socket_, {"--devices=1", "--memory_per_device=256MiB"});
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_EQ(Init(), Error::kSuccess) << GetLastErrorMessage();
  }
  void TearDown() override {
    Shutdown();
    daemon_.Stop();
    RemoveSocketDirectory(directory_);
  }

  // Calls `call` until it returns kDeviceLost; fails after `limit`.
  template <typename Call>
  void ExpectDeviceLostWithin(absl::Duration limit, Call call) {
    const absl::Time deadline = absl::Now() + limit;
    Error error = call();
    while (error != Error::kDeviceLost && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      error = call();
    }
    EXPECT_EQ(error, Error::kDeviceLost);
  }

  std::string directory_;
  std::string socket_;
  TestDaemon daemon_;
};

TEST_F(DeviceLostTest, CallsReportDeviceLost) {
  void* pointer = nullptr;
  ASSERT_EQ(Malloc(&pointer, 1 << 20), Error::kSuccess);
  StreamId stream = 0;
  ASSERT_EQ(StreamCreate(&stream), Error::kSuccess);
  daemon_.Kill();

  const absl::Time killed = absl::Now();
  ExpectDeviceLostWithin(absl::Seconds(3),
                         [&] { return StreamSynchronize(stream); });
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("the daemon serving " + socket_ +
                                               " exited (device lost)"));
  std::vector<char> host(1 << 20);
  EXPECT_EQ(
      Memcpy(host.data(), pointer, host.size(), MemcpyKind::kDeviceToHost),
      Error::kDeviceLost);
  EXPECT_EQ(
      Memcpy(pointer, host.data(), host.size(), MemcpyKind::kHostToDevice),
      Error::kDeviceLost);
  int count = 0;
  EXPECT_EQ(GetDeviceCount(&count), Error::kDeviceLost);
  EXPECT_EQ(Free(pointer), Error::kDeviceLost);
  void* more = nullptr;
  EXPECT_EQ(Malloc(&more, 16), Error::kDeviceLost);
  EXPECT_EQ(DeviceSynchronize(), Error::kDeviceLost);
  proto::LaunchOp op;
  op.set_name("aten::add");
  EXPECT_EQ(LaunchOp(op), Error::kDeviceLost);
  EXPECT_FALSE(IsConnected());
  EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
}

TEST_F(DeviceLostTest, PendingWaitsEndWhenTheDaemonDies) {
  // Enough queued device-to-device copies to keep the stream busy for a
  // while, so that a thread is inside StreamSynchronize when the daemon
  // is killed.
  const size_t bytes = 64u << 20;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(Malloc(&a, bytes), Error::kSuccess);
  ASSERT_EQ(Malloc(&b, bytes), Error::kSuccess);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(MemcpyAsync(b, a, bytes, MemcpyKind::kDeviceToDevice),
              Error::kSuccess);
  }
  std::atomic<bool> done{false};
  Error waited = Error::kSuccess;
  absl::Time returned;
  std::thread waiter([&] {
    waited = StreamSynchronize(kDefaultStream);
    returned = absl::Now();
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(100));
  const bool finished_early = done.load();
  const absl::Time killed = absl::Now();
  daemon_.Kill();
  waiter.join();
  ASSERT_FALSE(finished_early) << "the queued copies finished too fast";
  EXPECT_EQ(waited, Error::kDeviceLost);
  EXPECT_LT(returned - killed, absl::Seconds(3));
}

TEST_F(DeviceLostTest, FullRingWaitEndsWhenTheDaemonDies) {
  void* pointer = nullptr;
  ASSERT_EQ(Malloc(&pointer, 4096), Error::kSuccess);
  // A frozen daemon stops draining the ring: the writer waits for room
  // (the daemon is alive, so that is not an error)...
  daemon_.Signal(SIGSTOP);
  std::atomic<bool> done{false};
  std::atomic<int> submitted{0};
  Error error = Error::kSuccess;
  absl::Time returned;
  std::thread writer([&] {
    while ((error = MemsetAsync(pointer, 1, 4096)) == Error::kSuccess) {
      ++submitted;
    }
    returned = absl::Now();
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_FALSE(done.load()) << "writer stopped early: " << ErrorName(error);
  EXPECT_GT(submitted.load(), 100);
  // ...until the daemon dies.
  const absl::Time killed = absl::Now();
  daemon_.Kill();
  writer.join();
  EXPECT_EQ(error, Error::kDeviceLost);
  EXPECT_LT(returned - killed, absl::Seconds(3));
}

TEST_F(DeviceLostTest, ShutdownThenReattachToANewDaemon) {
  daemon_.Kill();
  ExpectDeviceLostWithin(absl::Seconds(3), [] {
    int count = 0;
    return GetDeviceCount(&count);
  });
  EXPECT_EQ(Init(), Error::kDeviceLost);  // sticky until Shutdown
  EXPECT_EQ(Shutdown(), Error::kSuccess);

  absl::Status restarted = daemon_.Start(socket_, {"--devices=1"});
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_EQ(Init(), Error::kSuccess) << GetLastErrorMessage();
  void* pointer = nullptr;
  ASSERT_EQ(Malloc(&pointer, 4096), Error::kSuccess) << GetLastErrorMessage();
  int value = 42, back = 0;
  ASSERT_EQ(Memcpy(pointer, &value, sizeof(value), MemcpyKind::kHostToDevice),
            Error::kSuccess);
  ASSERT_EQ(Memcpy(&back, pointer, sizeof(back), MemcpyKind::kDeviceToHost),
            Error::kSuccess);
  EXPECT_EQ(back, 42);
  EXPECT_EQ(Free(pointer), Error::kSuccess);
}

}  // namespace
}  // namespace openreg
