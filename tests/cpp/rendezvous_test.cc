#include "device_daemon/collectives/rendezvous.h"

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

using ::testing::HasSubstr;

Rendezvous::Part PartOf(int value, std::string signature = "sum f32 x1") {
  return {std::move(signature), std::make_shared<int>(value)};
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

TEST(RendezvousTest, TheLastArrivalRunsOnceWithThePartsInRankOrder) {
  constexpr int kRanks = 4;
  constexpr int kCollectives = 50;
  Rendezvous rendezvous(kRanks);
  std::atomic<int> runs{0};
  std::vector<std::vector<int>> seen(kCollectives);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      std::mt19937 jitter(rank);
      for (int k = 0; k < kCollectives; ++k) {
        // Arrival order changes from one collective to the next.
        std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 300));
        const absl::Status outcome = rendezvous.Arrive(
            rank, k, PartOf(rank * 1000 + k),
            [&, k](absl::Span<const Rendezvous::Part* const> parts) {
              ++runs;
              for (const Rendezvous::Part* part : parts) {
                seen[k].push_back(*static_cast<int*>(part->payload.get()));
              }
              return absl::OkStatus();
            },
            Soon());
        EXPECT_TRUE(outcome.ok()) << outcome;
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(runs.load(), kCollectives);
  for (int k = 0; k < kCollectives; ++k) {
    EXPECT_EQ(seen[k], (std::vector<int>{k, 1000 + k, 2000 + k, 3000 + k}));
  }
}

TEST(RendezvousTest, EveryRankGetsTheRunnersOutcome) {
  Rendezvous rendezvous(2);
  const auto failing = [](absl::Span<const Rendezvous::Part* const>) {
    return absl::InternalError("the reduction failed");
  };
  absl::Status other;
  std::thread rank1(
      [&] { other = rendezvous.Arrive(1, 0, PartOf(1), failing, Soon()); });
  const absl::Status mine = rendezvous.Arrive(0, 0, PartOf(0), failing, Soon());
  rank1.join();
  EXPECT_EQ(mine, absl::InternalError("the reduction failed"));
  EXPECT_EQ(other, mine);
}

TEST(RendezvousTest, RanksThatDisagreeFailWithoutRunning) {
  Rendezvous rendezvous(2);
  bool ran = false;
  const auto run = [&](absl::Span<const Rendezvous::Part* const>) {
    ran = true;
    return absl::OkStatus();
  };
  absl::Status other;
  std::thread rank1([&] {
    other = rendezvous.Arrive(1, 0, PartOf(1, "max f32 x8"), run, Soon());
  });
  const absl::Status mine =
      rendezvous.Arrive(0, 0, PartOf(0, "sum f32 x8"), run, Soon());
  rank1.join();
  EXPECT_FALSE(ran);
  EXPECT_EQ(mine.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mine.message()),
              HasSubstr("rank 0 sum f32 x8, rank 1 max f32 x8"));
  EXPECT_EQ(other, mine);
}

TEST(RendezvousTest, AnAbortWakesTheWaitingAndFailsLaterArrivals) {
  Rendezvous rendezvous(3);
  const auto run = [](absl::Span<const Rendezvous::Part* const>) {
    return absl::OkStatus();
  };
  absl::Status waiting;
  std::thread rank0(
      [&] { waiting = rendezvous.Arrive(0, 0, PartOf(0), run, Soon()); });
  absl::SleepFor(absl::Milliseconds(50));
  rendezvous.Abort(absl::UnavailableError("rank 2 (pid 42) ended"));
  rank0.join();
  EXPECT_EQ(waiting, absl::UnavailableError("rank 2 (pid 42) ended"));
  EXPECT_EQ(rendezvous.Arrive(1, 0, PartOf(1), run, Soon()), waiting);
}

TEST(RendezvousTest, AWaitPastItsDeadlineNamesTheMissingRanksAndAborts) {
  Rendezvous rendezvous(3);
  const auto run = [](absl::Span<const Rendezvous::Part* const>) {
    return absl::OkStatus();
  };
  const absl::Status late = rendezvous.Arrive(
      0, 7, PartOf(0), run, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(late.message()), HasSubstr("rank(s) 1, 2"));
  EXPECT_EQ(rendezvous.aborted(), late);
}

TEST(RendezvousTest, ARankOutsideTheCommunicatorOrArrivingTwiceIsRefused) {
  Rendezvous rendezvous(2);
  const auto run = [](absl::Span<const Rendezvous::Part* const>) {
    return absl::OkStatus();
  };
  EXPECT_EQ(rendezvous.Arrive(2, 0, PartOf(2), run, Soon()).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status first;
  std::thread rank0([&] {
    first = rendezvous.Arrive(0, 0, PartOf(0), run,
                              absl::Now() + absl::Milliseconds(200));
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(rendezvous.Arrive(0, 0, PartOf(0), run, Soon()).code(),
            absl::StatusCode::kFailedPrecondition);
  rank0.join();
}

}  // namespace
}  // namespace openreg::daemon
