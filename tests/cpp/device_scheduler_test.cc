// The executor pool of one device with fake runners (no sessions, no
// libtorch), so that ThreadSanitizer sees every scheduler transition
// (`make sanitize`): priorities, turns, parking and the doorbell, managed
// blocking, finishing.
#include "device_daemon/devices/device_scheduler.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data_plane/doorbell.h"
#include "device_daemon/devices/blocking_region.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

// The order in which fake commands ran, across runners.
class RunLog {
 public:
  void Append(const std::string& name) {
    absl::MutexLock lock(&mutex_);
    entries_.push_back(name);
  }
  std::vector<std::string> entries() const {
    absl::MutexLock lock(&mutex_);
    return entries_;
  }

 private:
  mutable absl::Mutex mutex_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mutex_);
};

// A stream stand-in: `pending` commands to run, each appending its name to
// the log (and running `before_command` first). Parks and is woken like a
// StreamWorker (data_plane/doorbell.h), through `Give`.
class FakeRunner : public DeviceScheduler::Runner {
 public:
  FakeRunner(std::string name, int priority, RunLog* log, Doorbell* doorbell,
             int ring_fd)
      : name_(std::move(name)),
        priority_(priority),
        log_(log),
        doorbell_(doorbell),
        ring_fd_(ring_fd) {}

  // The client side: publish work, then ring if the runner was parked.
  void Give(int commands) {
    pending_.fetch_add(commands, std::memory_order_seq_cst);
    if (ClaimParked(&parked_)) RingDoorbell(doorbell_, ring_fd_);
  }
  // Publishes work without ringing: only the periodic check finds it.
  void GiveSilently(int commands) {
    pending_.fetch_add(commands, std::memory_order_seq_cst);
  }
  void RequestFinish() {
    finish_.store(true, std::memory_order_seq_cst);
    if (ClaimParked(&parked_)) RingDoorbell(doorbell_, ring_fd_);
  }
  void set_before_command(std::function<void()> hook) {
    before_command_ = std::move(hook);
  }

  bool WaitFinished(absl::Duration timeout) {
    return finished_.WaitForNotificationWithTimeout(timeout);
  }
  int ran() const { return ran_.load(); }
  bool parked() const { return parked_.load() != 0; }
  int housekeeping_hits() const { return housekeeping_hits_.load(); }
  int finished_calls() const { return finished_calls_.load(); }
  size_t runners_seen_at_finish() const { return runners_seen_at_finish_; }
  void set_scheduler(DeviceScheduler* scheduler) { scheduler_ = scheduler; }

  int priority() const override { return priority_; }

  Outcome RunSlice(DeviceScheduler* scheduler) override {
    parked_.store(0, std::memory_order_seq_cst);
    while (true) {
      if (finish_.load(std::memory_order_seq_cst)) return Outcome::kFinished;
      if (pending_.load(std::memory_order_seq_cst) == 0) {
        parked_.store(1, std::memory_order_seq_cst);
        if (pending_.load(std::memory_order_seq_cst) == 0 &&
            !finish_.load(std::memory_order_seq_cst)) {
          return Outcome::kParked;
        }
        parked_.exchange(0, std::memory_order_seq_cst);
        continue;
      }
      if (before_command_) before_command_();
      log_->Append(name_);
      pending_.fetch_sub(1, std::memory_order_seq_cst);
      ran_.fetch_add(1);
      // One command per slice when someone else is ready: turns.
      if (scheduler->HigherPriorityWaiting(priority_) ||
          scheduler->OthersWaiting()) {
        return Outcome::kYield;
      }
    }
  }

  bool WantsToRun(bool housekeeping) const override {
    if (finish_.load(std::memory_order_seq_cst)) return true;
    if (parked_.load(std::memory_order_seq_cst) == 0) return true;
    if (housekeeping && pending_.load(std::memory_order_seq_cst) > 0) {
      housekeeping_hits_.fetch_add(1);
      return true;
    }
    return false;
  }

  void Finished() override {
    if (scheduler_ != nullptr) runners_seen_at_finish_ = scheduler_->runners();
    finished_calls_.fetch_add(1);
    finished_.Notify();
  }

 private:
  const std::string name_;
  const int priority_;
  RunLog* const log_;
  Doorbell* const doorbell_;
  const int ring_fd_;
  DeviceScheduler* scheduler_ = nullptr;
  std::function<void()> before_command_;
  std::atomic<int> pending_{0};
  std::atomic<uint32_t> parked_{0};
  std::atomic<bool> finish_{false};
  std::atomic<int> ran_{0};
  mutable std::atomic<int> housekeeping_hits_{0};
  std::atomic<int> finished_calls_{0};
  size_t runners_seen_at_finish_ = 0;
  absl::Notification finished_;
};

class DeviceSchedulerTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeRunner> MakeRunner(const std::string& name,
                                         int priority = 0) {
    return std::make_shared<FakeRunner>(name, priority, &log_, &doorbell_,
                                        ring_fd_);
  }

  // A runner named "busy" that holds the executor it runs on (one command)
  // until `release` is notified; returns once it holds it.
  std::shared_ptr<FakeRunner> HoldTheExecutor(DeviceScheduler& scheduler,
                                              absl::Notification* release) {
    auto busy = MakeRunner("busy");
    auto entered = std::make_shared<absl::Notification>();
    busy->set_before_command([entered, release] {
      if (!entered->HasBeenNotified()) entered->Notify();
      release->WaitForNotification();
    });
    scheduler.Add(busy);
    busy->Give(1);
    entered->WaitForNotification();
    return busy;
  }

  // Waits until `done` holds, at most 10 s.
  template <typename Done>
  static bool Eventually(Done done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  RunLog log_;
  Doorbell doorbell_{};
  // The clients' ring fd (data_plane/doorbell.h); every scheduler of a
  // test watches it.
  const int ring_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

  void TearDown() override { close(ring_fd_); }
};

TEST_F(DeviceSchedulerTest, OneExecutorRunsEveryRunnerWithWorkFromManyClients) {
  DeviceScheduler scheduler(/*device=*/0, /*executors=*/1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  std::vector<std::shared_ptr<FakeRunner>> runners;
  for (int i = 0; i < 16; ++i) {
    runners.push_back(MakeRunner("r" + std::to_string(i)));
    scheduler.Add(runners.back());
  }
  // Four client threads feed the runners in bursts, so that runners park
  // and are rung awake many times.
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int burst = 0; burst < 50; ++burst) {
        for (int i = c; i < 16; i += 4) runners[i]->Give(2);
        if (burst % 10 == 0) absl::SleepFor(absl::Microseconds(200));
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_TRUE(Eventually([&] {
    for (const auto& runner : runners) {
      if (runner->ran() != 100) return false;
    }
    return true;
  }));
  EXPECT_EQ(scheduler.threads(), 1);
  EXPECT_EQ(scheduler.runners(), 16u);
}

TEST_F(DeviceSchedulerTest, AHigherPriorityRunnerGoesFirst) {
  DeviceScheduler scheduler(0, 1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  // The only executor is held by `busy` until both others are queued.
  absl::Notification release;
  auto busy = HoldTheExecutor(scheduler, &release);
  auto low = MakeRunner("low", /*priority=*/0);
  auto high = MakeRunner("high", kGreatestStreamPriority);
  scheduler.Add(low);
  scheduler.Add(high);
  low->Give(3);
  high->Give(3);
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return low->ran() == 3 && high->ran() == 3; }));
  const std::vector<std::string> order = log_.entries();
  ASSERT_EQ(order.size(), 7u);
  EXPECT_EQ(order[0], "busy");
  EXPECT_EQ(order[1], "high");
  EXPECT_EQ(order[2], "high");
  EXPECT_EQ(order[3], "high");
  EXPECT_EQ(order[4], "low");
}

TEST_F(DeviceSchedulerTest, TheQueueLengthIsPublishedForClientsWaits) {
  DeviceScheduler scheduler(0, 1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  absl::Notification release;
  auto busy = HoldTheExecutor(scheduler, &release);
  EXPECT_EQ(doorbell_.queued_streams.load(), 0u);
  EXPECT_TRUE(ShouldSpinBeforeSleeping(doorbell_));
  std::vector<std::shared_ptr<FakeRunner>> waiting;
  // More queued streams than the host has cores.
  const int streams =
      std::max(64, static_cast<int>(std::thread::hardware_concurrency()) + 1);
  for (int i = 0; i < streams; ++i) {
    waiting.push_back(MakeRunner("w" + std::to_string(i)));
    scheduler.Add(waiting.back());
    waiting.back()->Give(1);
  }
  // They all wait for the one executor: a client's wait would be long, so
  // it sleeps at once instead of spinning.
  EXPECT_EQ(doorbell_.queued_streams.load(), static_cast<uint32_t>(streams));
  EXPECT_FALSE(ShouldSpinBeforeSleeping(doorbell_));
  release.Notify();
  EXPECT_TRUE(Eventually([&] {
    for (const auto& runner : waiting) {
      if (runner->ran() != 1) return false;
    }
    return doorbell_.queued_streams.load() == 0;
  }));
  EXPECT_TRUE(ShouldSpinBeforeSleeping(doorbell_));
}

TEST_F(DeviceSchedulerTest, EqualPrioritiesTakeTurns) {
  DeviceScheduler scheduler(0, 1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  absl::Notification release;
  auto busy = HoldTheExecutor(scheduler, &release);
  auto a = MakeRunner("a");
  auto b = MakeRunner("b");
  for (const auto& runner : {a, b}) {
    scheduler.Add(runner);
    runner->Give(4);
  }
  release.Notify();
  ASSERT_TRUE(Eventually([&] { return a->ran() == 4 && b->ran() == 4; }));
  std::vector<std::string> order = log_.entries();
  order.erase(order.begin());  // busy
  ASSERT_EQ(order.size(), 8u);
  // Each yields after one command while the other waits.
  for (size_t i = 1; i < order.size(); ++i) {
    EXPECT_NE(order[i], order[i - 1]) << "at " << i;
  }
}

TEST_F(DeviceSchedulerTest, AWaitInABlockingRegionLetsTheAwaitedRunnerRun) {
  DeviceScheduler scheduler(0, 1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  std::atomic<bool> producer_ran{false};
  std::atomic<int> threads_while_blocked{0};
  auto waiter = MakeRunner("waiter");
  auto producer = MakeRunner("producer");
  producer->set_before_command([&] {
    threads_while_blocked = scheduler.threads();
    producer_ran = true;
  });
  waiter->set_before_command([&] {
    // A cross-stream wait on the only executor: without managed blocking
    // the producer would never get a thread.
    BlockingRegion blocking;
    producer->Give(1);
    while (!producer_ran.load()) absl::SleepFor(absl::Microseconds(50));
  });
  scheduler.Add(waiter);
  scheduler.Add(producer);
  waiter->Give(1);
  ASSERT_TRUE(Eventually([&] { return waiter->ran() == 1; }));
  EXPECT_EQ(producer->ran(), 1);
  EXPECT_EQ(threads_while_blocked.load(), 2);
  // The spare thread leaves once nobody needs it.
  EXPECT_TRUE(Eventually([&] { return scheduler.threads() == 1; }));
}

TEST_F(DeviceSchedulerTest, FinishedComesOnceAfterTheSchedulerForgotTheRunner) {
  DeviceScheduler scheduler(0, 2, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  auto runner = MakeRunner("r");
  runner->set_scheduler(&scheduler);
  scheduler.Add(runner);
  runner->Give(5);
  ASSERT_TRUE(Eventually([&] { return runner->ran() == 5; }));
  runner->RequestFinish();
  ASSERT_TRUE(runner->WaitFinished(absl::Seconds(10)));
  EXPECT_EQ(runner->runners_seen_at_finish(), 0u);
  EXPECT_EQ(scheduler.runners(), 0u);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(runner->finished_calls(), 1);
}

TEST_F(DeviceSchedulerTest, AParkedRunnerComesBackByWakeOrByHousekeeping) {
  DeviceScheduler scheduler(0, 1, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  auto runner = MakeRunner("r");
  scheduler.Add(runner);
  // An empty runner parks at once, giving its executor back.
  ASSERT_TRUE(Eventually([&] { return runner->parked(); }));
  // Wake (a stop or drain request) queues it without asking it.
  runner->GiveSilently(1);
  scheduler.Wake(runner.get());
  ASSERT_TRUE(Eventually([&] { return runner->ran() == 1; }));
  EXPECT_EQ(runner->housekeeping_hits(), 0);
  // Work published without a ring (a client that does not follow the
  // protocol) is found by the periodic check: latency, not a lost command.
  ASSERT_TRUE(Eventually([&] { return runner->parked(); }));
  absl::SleepFor(absl::Milliseconds(5));  // past its last look at the work
  runner->GiveSilently(3);
  EXPECT_TRUE(Eventually([&] { return runner->ran() == 4; }));
  EXPECT_GE(runner->housekeeping_hits(), 1);
}

TEST_F(DeviceSchedulerTest, AClientsNextRingGoesToTheExecutorOfItsLastSlice) {
  // Each executor that ran a multi-threaded kernel keeps an OpenMP team;
  // a client whose slices hop between executors keeps two, and libgomp
  // then stops spinning between regions. Across the idle executor's
  // periodic checks (every 100 ms), a client's slices stay on one thread.
  // A periodic check that finds the client's work before the ring's wake
  // does may move it; and the executor it left, woken by that ring for
  // nothing, may be back in the epoll wait after the new one and take the
  // next ring (CI once saw "a...ab a...a"). Before, each periodic check
  // moved it (4 moves in 40 slices).
  DeviceScheduler scheduler(0, 2, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  auto runner = MakeRunner("r");
  absl::Mutex mutex;
  std::vector<std::thread::id> threads;
  runner->set_before_command([&] {
    absl::MutexLock lock(&mutex);
    threads.push_back(std::this_thread::get_id());
  });
  scheduler.Add(runner);
  constexpr int kSlices = 40;
  for (int i = 1; i <= kSlices; ++i) {
    ASSERT_TRUE(Eventually([&] { return runner->parked(); }));
    runner->Give(1);
    ASSERT_TRUE(Eventually([&] { return runner->ran() == i; }));
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::MutexLock lock(&mutex);
  ASSERT_EQ(threads.size(), static_cast<size_t>(kSlices));
  int moves = 0;
  std::string order;  // which thread ran each slice, for the failure
  for (size_t i = 0; i < threads.size(); ++i) {
    if (i > 0 && threads[i] != threads[i - 1]) ++moves;
    order += threads[i] == threads.front() ? 'a' : 'b';
  }
  EXPECT_LE(moves, 2) << order;
}

TEST_F(DeviceSchedulerTest, WhileOneExecutorRunsALongSliceAnotherServesRings) {
  DeviceScheduler scheduler(0, 2, &doorbell_);
  ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
  absl::SleepFor(absl::Milliseconds(250));  // the spare one is on standby
  absl::Notification release;
  auto busy = HoldTheExecutor(scheduler, &release);
  auto other = MakeRunner("other");
  scheduler.Add(other);
  ASSERT_TRUE(Eventually([&] { return other->parked(); }));
  other->Give(2);
  EXPECT_TRUE(Eventually([&] { return other->ran() == 2; }));
  EXPECT_EQ(busy->ran(), 0);  // still held
  release.Notify();
  EXPECT_TRUE(Eventually([&] { return busy->ran() == 1; }));
}

TEST_F(DeviceSchedulerTest, DestroyingTheSchedulerStopsItsExecutors) {
  auto runner = MakeRunner("r");
  {
    DeviceScheduler scheduler(0, 3, &doorbell_);
    ASSERT_TRUE(scheduler.WatchRing(ring_fd_).ok());
    EXPECT_EQ(scheduler.threads(), 3);
    scheduler.Add(runner);
    runner->Give(10);
    ASSERT_TRUE(Eventually([&] { return runner->ran() == 10; }));
  }
  // Joined; the runner was dropped without Finished() (its owner would
  // have stopped it first).
  EXPECT_EQ(runner->finished_calls(), 0);
  EXPECT_EQ(runner.use_count(), 1);
}

}  // namespace
}  // namespace openreg::daemon
