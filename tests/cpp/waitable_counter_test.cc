#include "data_plane/waitable_counter.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace openreg {
namespace {

std::unique_ptr<WaitableCounter> MakeCounter() {
  return std::unique_ptr<WaitableCounter>(new WaitableCounter());
}

TEST(WaitableCounterTest, ReachedTargetReturnsAtOnce) {
  auto counter = MakeCounter();
  counter->Advance(5);
  EXPECT_EQ(counter->Load(), 5u);
  EXPECT_TRUE(counter->WaitForAtLeast(5, absl::ZeroDuration()));
  EXPECT_TRUE(counter->WaitForAtLeast(3, absl::ZeroDuration()));
  EXPECT_TRUE(counter->WaitForChange(4, absl::ZeroDuration()));
}

TEST(WaitableCounterTest, TimesOutWhenNotAdvanced) {
  auto counter = MakeCounter();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(counter->WaitForAtLeast(1, absl::Milliseconds(50)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  EXPECT_FALSE(counter->WaitForChange(0, absl::Milliseconds(10)));
}

TEST(WaitableCounterTest, SleepingWaiterWakesOnAdvanceFromAnotherThread) {
  auto counter = MakeCounter();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    // No spin: goes straight to the futex.
    EXPECT_TRUE(
        counter->WaitForAtLeast(3, absl::Seconds(10), absl::ZeroDuration()));
    woke = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  counter->Advance(1);
  counter->Advance(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(woke.load());
  const absl::Time advanced = absl::Now();
  counter->Advance(3);
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_LT(absl::Now() - advanced, absl::Seconds(2));
  EXPECT_EQ(counter->sleepers.load(), 0u);
}

TEST(WaitableCounterTest, AdvancesShortOfTheSleepersTargetCostNoWake) {
  auto counter = MakeCounter();
  std::thread waiter([&] {
    EXPECT_TRUE(
        counter->WaitForAtLeast(50, absl::Seconds(10), absl::ZeroDuration()));
  });
  while (counter->wake_at.load() != 50) std::this_thread::yield();
  const uint32_t word = counter->futex_word.load();
  for (uint64_t value = 1; value < 50; ++value) counter->Advance(value);
  // Nobody was woken for commands the waiter does not wait for.
  EXPECT_EQ(counter->futex_word.load(), word);
  counter->Advance(50);
  waiter.join();
  EXPECT_NE(counter->futex_word.load(), word);
  EXPECT_EQ(counter->sleepers.load(), 0u);
}

TEST(WaitableCounterTest, SleeperWithALaterTargetSleepsOnAfterAnEarlierWakes) {
  auto counter = MakeCounter();
  std::atomic<bool> early_done{false};
  std::atomic<bool> late_done{false};
  std::thread late([&] {
    EXPECT_TRUE(
        counter->WaitForAtLeast(20, absl::Seconds(10), absl::ZeroDuration()));
    late_done = true;
  });
  while (counter->wake_at.load() != 20) std::this_thread::yield();
  std::thread early([&] {
    EXPECT_TRUE(
        counter->WaitForAtLeast(10, absl::Seconds(10), absl::ZeroDuration()));
    early_done = true;
  });
  while (counter->wake_at.load() != 10) std::this_thread::yield();
  counter->Advance(10);
  early.join();
  EXPECT_TRUE(early_done.load());
  // The later sleeper woke too, found 10 < 20 and published 20 again.
  while (counter->wake_at.load() != 20) std::this_thread::yield();
  EXPECT_FALSE(late_done.load());
  counter->Advance(20);
  late.join();
  EXPECT_TRUE(late_done.load());
}

TEST(WaitableCounterTest, ManyWaitersAllWake) {
  auto counter = MakeCounter();
  std::vector<std::thread> waiters;
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i) {
    waiters.emplace_back([&, i] {
      EXPECT_TRUE(counter->WaitForAtLeast(1 + i % 4, absl::Seconds(10)));
      done.fetch_add(1);
    });
  }
  for (uint64_t value = 1; value <= 4; ++value) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    counter->Advance(value);
  }
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(done.load(), 8);
}

TEST(WaitableCounterTest, ProducerConsumerHandOff) {
  // Two counters used as a ping-pong: each side waits for the other's
  // value, so any lost wake-up would deadlock (and time out).
  auto ping = MakeCounter();
  auto pong = MakeCounter();
  constexpr uint64_t kRounds = 2000;
  std::thread other([&] {
    for (uint64_t i = 1; i <= kRounds; ++i) {
      ASSERT_TRUE(ping->WaitForAtLeast(i, absl::Seconds(10)));
      pong->Advance(i);
    }
  });
  for (uint64_t i = 1; i <= kRounds; ++i) {
    ping->Advance(i);
    ASSERT_TRUE(pong->WaitForAtLeast(i, absl::Seconds(10)));
  }
  other.join();
  EXPECT_EQ(pong->Load(), kRounds);
}

}  // namespace
}  // namespace openreg

namespace openreg {
namespace {

TEST(WaitableCounterWakeTest, WakeAllEndsASleepingWaitEarly) {
  WaitableCounter counter{};
  std::atomic<bool> returned{false};
  bool reached = true;
  std::thread waiter([&] {
    reached =
        counter.WaitForAtLeast(1, absl::Seconds(10), absl::ZeroDuration());
    returned = true;
  });
  while (counter.sleepers.load() == 0) std::this_thread::yield();
  // Repeated: a wake that lands between the waiter registering and reading
  // the futex word is (correctly) not seen by that sleep.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!returned.load() && absl::Now() < deadline) {
    counter.WakeAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(reached);  // interrupted, not reached
}

}  // namespace
}  // namespace openreg
