// Collectives through the real stream workers and executor: several
// sessions of this process (one rank each) joined to one communicator,
// their Collective commands written into their rings as clients would.
#include "device_daemon/collectives/collective_engine.h"

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "data_plane/fault_plan.h"
#include "device_daemon/collectives/communicators.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/faults/fault_injector.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/sessions/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int32_t kFloat = 6;
constexpr int32_t kLong = 4;
constexpr int32_t kHalf = 5;

class CollectiveEngineTest : public ::testing::Test {
 protected:
  CollectiveEngineTest() {
    devices_ = *Devices::Create(2, 64 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &op_runner_);
    executor_->SetCollectiveRunner(&engine_);
  }
  ~CollectiveEngineTest() override {
    for (auto& rank : ranks_) {
      if (rank.session != nullptr) rank.session->Close();
    }
  }

  struct Rank {
    std::unique_ptr<Session> session;
    std::unique_ptr<StreamDriver> stream;
    uint64_t communicator = 0;
    uint64_t number = 0;
    // Transfers count per (kind, peer), as the runtime numbers them.
    std::map<std::pair<int, int>, uint64_t> transfers;
  };

  // `n` ranks (sessions), rank r on device r % 2, joined to one
  // communicator.
  void MakeRanks(int n, absl::Duration timeout = absl::Seconds(20)) {
    for (int r = 0; r < n; ++r) {
      Rank rank;
      rank.session = MakeTestSession(100 + r, devices_.get(), executor_.get());
      StreamSlot* slot = rank.session->stream_slot(0);
      rank.stream = std::make_unique<StreamDriver>(
          slot, rank.session->ring_buffer(0), rank.session->limits().ring_bytes,
          devices_->doorbell(slot->device),
          rank.session->ring_fd(slot->device));
      absl::StatusOr<uint64_t> handle = communicators_.Join(
          "job-1", n, r, rank.session->id(), rank.session->pid(), timeout);
      ASSERT_TRUE(handle.ok()) << handle.status();
      rank.communicator = *handle;
      ranks_.push_back(std::move(rank));
    }
  }

  uint64_t Alloc(int r, uint64_t bytes) {
    absl::StatusOr<uint64_t> address = ranks_[r].session->Allocate(0, bytes);
    EXPECT_TRUE(address.ok()) << address.status();
    return *address;
  }

  template <typename T>
  void Upload(int r, uint64_t address, const std::vector<T>& values) {
    Session& session = *ranks_[r].session;
    std::memcpy(session.staging(), values.data(), values.size() * sizeof(T));
    proto::Command command;
    command.mutable_h2d()->set_dst(address);
    command.mutable_h2d()->set_size(values.size() * sizeof(T));
    ASSERT_EQ(ranks_[r].stream->Run(command), std::nullopt);
  }

  template <typename T>
  std::vector<T> Download(int r, uint64_t address, size_t count) {
    Session& session = *ranks_[r].session;
    proto::Command command;
    command.mutable_d2h()->set_src(address);
    command.mutable_d2h()->set_size(count * sizeof(T));
    EXPECT_EQ(ranks_[r].stream->Run(command), std::nullopt);
    std::vector<T> values(count);
    std::memcpy(values.data(), session.staging(), count * sizeof(T));
    return values;
  }

  proto::Command Collective(int r, proto::CollectiveKind kind, int32_t dtype,
                            uint64_t count, uint64_t send, uint64_t recv,
                            proto::ReduceOp op = proto::SUM, int root = 0) {
    proto::Command command;
    proto::Collective* collective = command.mutable_collective();
    collective->set_communicator(ranks_[r].communicator);
    collective->set_kind(kind);
    collective->set_op(op);
    collective->set_dtype(dtype);
    collective->set_count(count);
    collective->set_send(send);
    collective->set_recv(recv);
    collective->set_root(root);
    collective->set_number(ranks_[r].number++);
    return command;
  }

  proto::Command Transfer(int r, proto::CollectiveKind kind, int peer,
                          uint64_t count, uint64_t address) {
    proto::Command command;
    proto::Collective* collective = command.mutable_collective();
    collective->set_communicator(ranks_[r].communicator);
    collective->set_kind(kind);
    collective->set_dtype(kFloat);
    collective->set_count(count);
    collective->set_peer(peer);
    if (kind == proto::SEND) {
      collective->set_send(address);
    } else {
      collective->set_recv(address);
    }
    collective->set_number(ranks_[r].transfers[{kind, peer}]++);
    return command;
  }

  proto::Command AllToAllV(int r, uint64_t send,
                           const std::vector<uint64_t>& send_counts,
                           uint64_t recv,
                           const std::vector<uint64_t>& recv_counts) {
    proto::Command command =
        Collective(r, proto::ALL_TO_ALLV, kFloat, 0, send, recv);
    for (uint64_t count : send_counts) {
      command.mutable_collective()->add_send_counts(count);
    }
    for (uint64_t count : recv_counts) {
      command.mutable_collective()->add_recv_counts(count);
    }
    return command;
  }

  // Each (rank, command) from its own thread at once; the errors in order.
  std::vector<std::optional<StreamErrorRecord>> RunEach(
      const std::vector<std::pair<int, proto::Command>>& commands) {
    std::vector<std::optional<StreamErrorRecord>> errors(commands.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < commands.size(); ++i) {
      threads.emplace_back([&, i] {
        errors[i] = ranks_[commands[i].first].stream->Run(commands[i].second);
      });
    }
    for (std::thread& thread : threads) thread.join();
    return errors;
  }

  // Every rank submits its command (each from its own thread, as separate
  // processes would) and waits for it; returns each rank's error.
  std::vector<std::optional<StreamErrorRecord>> RunAll(
      const std::vector<proto::Command>& commands) {
    std::vector<std::optional<StreamErrorRecord>> errors(commands.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < commands.size(); ++r) {
      threads.emplace_back(
          [&, r] { errors[r] = ranks_[r].stream->Run(commands[r]); });
    }
    for (std::thread& thread : threads) thread.join();
    return errors;
  }

  std::unique_ptr<Devices> devices_;
  AtenOpRunner op_runner_;
  Communicators communicators_;
  CollectiveEngine engine_{&communicators_};
  std::unique_ptr<CommandExecutor> executor_;
  std::vector<Rank> ranks_;
};

TEST_F(CollectiveEngineTest, AllReduceSumsEveryRanksBufferInPlace) {
  MakeRanks(4);
  constexpr int kCount = 100000;  // several chunks
  std::vector<uint64_t> buffers;
  std::vector<proto::Command> commands;
  for (int r = 0; r < 4; ++r) {
    buffers.push_back(Alloc(r, kCount * sizeof(float)));
    std::vector<float> values(kCount);
    for (int i = 0; i < kCount; ++i) values[i] = 0.1f * (r + 1) + i;
    Upload(r, buffers[r], values);
    commands.push_back(Collective(r, proto::ALL_REDUCE, kFloat, kCount,
                                  buffers[r], buffers[r]));
  }
  for (const auto& error : RunAll(commands)) EXPECT_EQ(error, std::nullopt);
  for (int r = 0; r < 4; ++r) {
    const std::vector<float> result = Download<float>(r, buffers[r], kCount);
    for (int i = 0; i < kCount; i += 997) {
      // The stated order: ((p0 + p1) + p2) + p3, in float.
      float expected = 0.1f + i;
      for (int q = 1; q < 4; ++q) expected += 0.1f * (q + 1) + i;
      ASSERT_EQ(result[i], expected) << "rank " << r << " element " << i;
    }
  }
}

TEST_F(CollectiveEngineTest, ReductionsOfIntegersAndHalves) {
  MakeRanks(2);
  const uint64_t a0 = Alloc(0, 3 * 8), a1 = Alloc(1, 3 * 8);
  Upload<int64_t>(0, a0, {5, -7, 3});
  Upload<int64_t>(1, a1, {2, 9, 3});
  for (auto [op, expected] :
       std::vector<std::pair<proto::ReduceOp, std::vector<int64_t>>>{
           {proto::MAX, {5, 9, 3}}, {proto::MIN, {2, -7, 3}}}) {
    Upload<int64_t>(0, a0, {5, -7, 3});
    Upload<int64_t>(1, a1, {2, 9, 3});
    const auto errors =
        RunAll({Collective(0, proto::ALL_REDUCE, kLong, 3, a0, a0, op),
                Collective(1, proto::ALL_REDUCE, kLong, 3, a1, a1, op)});
    EXPECT_EQ(errors[0], std::nullopt);
    EXPECT_EQ(Download<int64_t>(0, a0, 3), expected);
    EXPECT_EQ(Download<int64_t>(1, a1, 3), expected);
  }
  // AVG of integers is refused on every rank, naming why.
  const auto errors =
      RunAll({Collective(0, proto::ALL_REDUCE, kLong, 3, a0, a0, proto::AVG),
              Collective(1, proto::ALL_REDUCE, kLong, 3, a1, a1, proto::AVG)});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_NE(error->message.find("avg needs a floating-point dtype"),
              std::string::npos)
        << error->message;
  }
}

TEST_F(CollectiveEngineTest, GatherScatterAndAllToAllMoveBlocksByRank) {
  MakeRanks(3);
  std::vector<uint64_t> send, recv;
  for (int r = 0; r < 3; ++r) {
    send.push_back(Alloc(r, 3 * 2 * sizeof(float)));
    recv.push_back(Alloc(r, 3 * 2 * sizeof(float)));
    // Rank r's send: blocks of 2, block q = {10r + q, 10r + q + 0.5}.
    std::vector<float> values;
    for (int q = 0; q < 3; ++q) {
      values.push_back(10.0f * r + q);
      values.push_back(10.0f * r + q + 0.5f);
    }
    Upload(r, send[r], values);
  }
  std::vector<proto::Command> all_to_all, all_gather;
  for (int r = 0; r < 3; ++r) {
    all_to_all.push_back(
        Collective(r, proto::ALL_TO_ALL, kFloat, 2, send[r], recv[r]));
  }
  for (const auto& error : RunAll(all_to_all)) EXPECT_EQ(error, std::nullopt);
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> got = Download<float>(r, recv[r], 6);
    for (int q = 0; q < 3; ++q) {
      EXPECT_EQ(got[2 * q], 10.0f * q + r);
      EXPECT_EQ(got[2 * q + 1], 10.0f * q + r + 0.5f);
    }
  }
  // all_gather of each rank's first block.
  for (int r = 0; r < 3; ++r) {
    all_gather.push_back(
        Collective(r, proto::ALL_GATHER, kFloat, 2, send[r], recv[r]));
  }
  for (const auto& error : RunAll(all_gather)) EXPECT_EQ(error, std::nullopt);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(Download<float>(r, recv[r], 6),
              (std::vector<float>{0, 0.5, 10, 10.5, 20, 20.5}));
  }
}

TEST_F(CollectiveEngineTest, ReduceScatterAndBroadcast) {
  MakeRanks(2);
  const uint64_t s0 = Alloc(0, 4 * 2), s1 = Alloc(1, 4 * 2);
  const uint64_t r0 = Alloc(0, 2 * 2), r1 = Alloc(1, 2 * 2);
  // float16 1, 2, 3, 4 and 10, 20, 30, 40 (bits).
  Upload<uint16_t>(0, s0, {0x3c00, 0x4000, 0x4200, 0x4400});
  Upload<uint16_t>(1, s1, {0x4900, 0x4d00, 0x4f80, 0x5100});
  auto errors =
      RunAll({Collective(0, proto::REDUCE_SCATTER, kHalf, 2, s0, r0),
              Collective(1, proto::REDUCE_SCATTER, kHalf, 2, s1, r1)});
  EXPECT_EQ(errors[0], std::nullopt);
  EXPECT_EQ(Download<uint16_t>(0, r0, 2),
            (std::vector<uint16_t>{0x4980, 0x4d80}));  // 11, 22
  EXPECT_EQ(Download<uint16_t>(1, r1, 2),
            (std::vector<uint16_t>{0x5020, 0x5180}));  // 33, 44
  errors = RunAll(
      {Collective(0, proto::BROADCAST, kHalf, 2, 0, r0, proto::SUM, /*root=*/1),
       Collective(1, proto::BROADCAST, kHalf, 2, 0, r1, proto::SUM,
                  /*root=*/1)});
  EXPECT_EQ(errors[0], std::nullopt);
  EXPECT_EQ(Download<uint16_t>(0, r0, 2),
            (std::vector<uint16_t>{0x5020, 0x5180}));
}

TEST_F(CollectiveEngineTest, InPlaceReduceToALaterRootAndInPlaceReduceScatter) {
  MakeRanks(3);
  std::vector<uint64_t> buffers;
  for (int r = 0; r < 3; ++r) {
    buffers.push_back(Alloc(r, 3 * 2 * sizeof(float)));
    std::vector<float> values;
    for (int i = 0; i < 6; ++i) values.push_back(100.0f * r + i);
    Upload(r, buffers[r], values);
  }
  // reduce to root 2, its output its own input.
  std::vector<proto::Command> reduce;
  for (int r = 0; r < 3; ++r) {
    reduce.push_back(Collective(r, proto::REDUCE, kFloat, 6, buffers[r],
                                r == 2 ? buffers[r] : 0, proto::SUM,
                                /*root=*/2));
  }
  for (const auto& error : RunAll(reduce)) EXPECT_EQ(error, std::nullopt);
  EXPECT_EQ(Download<float>(2, buffers[2], 6),
            (std::vector<float>{300, 303, 306, 309, 312, 315}));
  // reduce_scatter whose output is block r of rank r's own input.
  std::vector<proto::Command> scatter;
  for (int r = 0; r < 3; ++r) {
    std::vector<float> values;
    for (int i = 0; i < 6; ++i) values.push_back(100.0f * r + i);
    Upload(r, buffers[r], values);
    scatter.push_back(Collective(r, proto::REDUCE_SCATTER, kFloat, 2,
                                 buffers[r],
                                 buffers[r] + r * 2 * sizeof(float)));
  }
  for (const auto& error : RunAll(scatter)) EXPECT_EQ(error, std::nullopt);
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> got = Download<float>(r, buffers[r], 6);
    EXPECT_EQ(got[2 * r], 300.0f + 6 * r) << r;
    EXPECT_EQ(got[2 * r + 1], 303.0f + 6 * r) << r;
  }
}

TEST_F(CollectiveEngineTest,
       MismatchedCollectivesFailOnEveryRankWritingNothing) {
  MakeRanks(2);
  const uint64_t a0 = Alloc(0, 16), a1 = Alloc(1, 16);
  Upload<float>(0, a0, {1, 2, 3, 4});
  Upload<float>(1, a1, {5, 6, 7, 8});
  const auto errors =
      RunAll({Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0),
              Collective(1, proto::ALL_REDUCE, kFloat, 3, a1, a1)});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
    EXPECT_EQ(error->op, "occl::all_reduce");
    EXPECT_NE(error->message.find("all_reduce(sum) of 4 x Float"),
              std::string::npos)
        << error->message;
    EXPECT_NE(error->message.find("all_reduce(sum) of 3 x Float"),
              std::string::npos);
  }
  EXPECT_EQ(Download<float>(0, a0, 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(Download<float>(1, a1, 4), (std::vector<float>{5, 6, 7, 8}));
}

TEST_F(CollectiveEngineTest, ARankThatEndsFailsTheOthersNamingIt) {
  MakeRanks(2);
  const uint64_t a0 = Alloc(0, 16);
  const absl::Time start = absl::Now();
  std::optional<StreamErrorRecord> error;
  std::thread waiter([&] {
    error = ranks_[0].stream->Run(
        Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0));
  });
  absl::SleepFor(absl::Milliseconds(200));
  ranks_[1].session->Close();
  waiter.join();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
  EXPECT_NE(error->message.find("rank 1 (pid "), std::string::npos)
      << error->message;
  EXPECT_NE(error->message.find("ended"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(communicators_.size(), 1u);  // rank 0 is still in it
}

TEST_F(CollectiveEngineTest, ARankThatNeverArrivesIsNamedAtTheTimeout) {
  MakeRanks(3, /*timeout=*/absl::Milliseconds(300));
  const uint64_t a0 = Alloc(0, 16), a1 = Alloc(1, 16);
  const auto errors = RunAll({Collective(0, proto::BARRIER, kFloat, 0, 0, 0),
                              Collective(1, proto::BARRIER, kFloat, 0, 0, 0)});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
    EXPECT_NE(error->message.find("rank(s) 2, which did not arrive"),
              std::string::npos)
        << error->message;
  }
  (void)a0;
  (void)a1;
}

TEST_F(CollectiveEngineTest, BadMemoryFromOneRankFailsAllWithoutWaiting) {
  MakeRanks(2);
  const uint64_t a0 = Alloc(0, 16);
  const auto errors = RunAll(
      {Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0),
       Collective(1, proto::ALL_REDUCE, kFloat, 4, 0xdead0000, 0xdead0000)});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
    EXPECT_NE(error->message.find("rank 1 (pid"), std::string::npos)
        << error->message;
  }
}

TEST_F(CollectiveEngineTest, SendsMeetTheMatchingReceivesInOrderPerPeer) {
  MakeRanks(3);
  const uint64_t from = Alloc(0, 4 * sizeof(float));
  const uint64_t into1 = Alloc(1, 4 * sizeof(float));
  const uint64_t into2 = Alloc(2, 4 * sizeof(float));
  // Rank 0 -> 1 twice, then 0 -> 2: each send meets the receive with its
  // number for that pair; rank 2 is not involved in the first two.
  for (float first : {1.0f, 5.0f}) {
    Upload<float>(0, from, {first, first + 1, first + 2, first + 3});
    const auto errors = RunEach({{0, Transfer(0, proto::SEND, 1, 4, from)},
                                 {1, Transfer(1, proto::RECV, 0, 4, into1)}});
    EXPECT_EQ(errors[0], std::nullopt);
    EXPECT_EQ(errors[1], std::nullopt);
    EXPECT_EQ(Download<float>(1, into1, 4),
              (std::vector<float>{first, first + 1, first + 2, first + 3}));
  }
  const auto errors = RunEach({{2, Transfer(2, proto::RECV, 0, 2, into2)},
                               {0, Transfer(0, proto::SEND, 2, 2, from)}});
  EXPECT_EQ(errors[0], std::nullopt);
  EXPECT_EQ(Download<float>(2, into2, 2), (std::vector<float>{5, 6}));
}

TEST_F(CollectiveEngineTest, ASendAndARecvThatDisagreeFailBothNamingBoth) {
  MakeRanks(2);
  const uint64_t from = Alloc(0, 16), into = Alloc(1, 16);
  Upload<float>(1, into, {9, 9, 9, 9});
  const auto errors = RunEach({{0, Transfer(0, proto::SEND, 1, 4, from)},
                               {1, Transfer(1, proto::RECV, 0, 3, into)}});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
    EXPECT_NE(error->message.find("4 x Float from rank 0 to rank 1"),
              std::string::npos)
        << error->message;
    EXPECT_NE(error->message.find("3 x Float from rank 0 to rank 1"),
              std::string::npos);
  }
  EXPECT_EQ(Download<float>(1, into, 4), (std::vector<float>{9, 9, 9, 9}));
}

TEST_F(CollectiveEngineTest, AllToAllVMovesUnequalBlocksOrRefusesBadSplits) {
  MakeRanks(2);
  // Rank 0 sends 1 element to itself and 3 to rank 1; rank 1 sends 2 to
  // rank 0 and none to itself.
  const uint64_t send0 = Alloc(0, 4 * 4), recv0 = Alloc(0, 3 * 4);
  const uint64_t send1 = Alloc(1, 2 * 4), recv1 = Alloc(1, 3 * 4);
  Upload<float>(0, send0, {1, 2, 3, 4});
  Upload<float>(1, send1, {7, 8});
  auto errors = RunAll({AllToAllV(0, send0, {1, 3}, recv0, {1, 2}),
                        AllToAllV(1, send1, {2, 0}, recv1, {3, 0})});
  EXPECT_EQ(errors[0], std::nullopt);
  EXPECT_EQ(errors[1], std::nullopt);
  EXPECT_EQ(Download<float>(0, recv0, 3), (std::vector<float>{1, 7, 8}));
  EXPECT_EQ(Download<float>(1, recv1, 3), (std::vector<float>{2, 3, 4}));
  // Rank 1 expects 2 elements from rank 0, which sends 3: refused on both
  // ranks before anything moves.
  Upload<float>(1, recv1, {0, 0, 0});
  errors = RunAll({AllToAllV(0, send0, {1, 3}, recv0, {1, 2}),
                   AllToAllV(1, send1, {2, 0}, recv1, {2, 0})});
  for (const auto& error : errors) {
    ASSERT_TRUE(error.has_value());
    EXPECT_NE(error->message.find(
                  "rank 0 sends 3 elements to rank 1, which expects 2"),
              std::string::npos)
        << error->message;
  }
  EXPECT_EQ(Download<float>(1, recv1, 3), (std::vector<float>{0, 0, 0}));
}

TEST_F(CollectiveEngineTest, ARankThatLeavesFailsTheOthersWaitingNamingIt) {
  MakeRanks(2);
  const uint64_t a0 = Alloc(0, 16);
  const absl::Time start = absl::Now();
  std::optional<StreamErrorRecord> error;
  std::thread waiter([&] {
    error = ranks_[0].stream->Run(
        Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0));
  });
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(communicators_
                  .Leave(ranks_[1].session->id(), ranks_[1].communicator,
                         /*abort=*/false)
                  .ok());
  waiter.join();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::COLLECTIVE_FAILURE);
  EXPECT_NE(error->message.find("rank 1 (pid "), std::string::npos)
      << error->message;
  EXPECT_NE(error->message.find("left communicator job-1"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A transfer to the rank that left fails at once too, on a channel that
  // did not exist when it left.
  const std::optional<StreamErrorRecord> send_error =
      ranks_[0].stream->Run(Transfer(0, proto::SEND, 1, 4, a0));
  ASSERT_TRUE(send_error.has_value());
  EXPECT_NE(send_error->message.find("left communicator job-1"),
            std::string::npos)
      << send_error->message;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(CollectiveEngineTest, StatsShowWhichRanksJoinedAPendingCollective) {
  MakeRanks(3);
  const uint64_t a0 = Alloc(0, 16), a2 = Alloc(2, 16);
  const uint64_t from = Alloc(1, 16);
  std::vector<std::optional<StreamErrorRecord>> errors(3);
  std::thread rank0([&] {
    errors[0] = ranks_[0].stream->Run(
        Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0));
  });
  std::thread rank2([&] {
    errors[2] = ranks_[2].stream->Run(
        Collective(2, proto::ALL_REDUCE, kFloat, 4, a2, a2));
  });
  // Rank 1 sends to rank 2, which has not posted its receive.
  std::optional<StreamErrorRecord> send_error;
  std::thread sender([&] {
    send_error = ranks_[1].stream->Run(Transfer(1, proto::SEND, 2, 4, from));
  });
  std::vector<CommunicatorStats> stats;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    stats = communicators_.Stats();
    if (stats.size() == 1 && stats[0].pending.size() == 2 &&
        stats[0].pending[0].waiting.arrived.size() == 2) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].id, "job-1");
  EXPECT_EQ(stats[0].size, 3);
  ASSERT_EQ(stats[0].members.size(), 3u);
  EXPECT_EQ(stats[0].members[1].pid, ranks_[1].session->pid());
  ASSERT_EQ(stats[0].pending.size(), 2u);
  const CommunicatorStats::Pending& collective = stats[0].pending[0];
  EXPECT_FALSE(collective.transfer);
  EXPECT_EQ(collective.waiting.sequence, 0u);
  EXPECT_EQ(collective.waiting.signature, "all_reduce(sum) of 4 x Float");
  ASSERT_EQ(collective.waiting.arrived.size(), 2u);
  EXPECT_EQ(collective.waiting.arrived[0].first, 0);
  EXPECT_EQ(collective.waiting.arrived[1].first, 2);
  EXPECT_EQ(collective.waiting.missing, std::vector<int>{1});
  const CommunicatorStats::Pending& transfer = stats[0].pending[1];
  EXPECT_TRUE(transfer.transfer);
  EXPECT_EQ(transfer.from, 1);
  EXPECT_EQ(transfer.to, 2);
  EXPECT_EQ(transfer.waiting.missing, std::vector<int>{2});
  // Rank 1 ends: the communicator is aborted, naming it, and nothing is
  // pending any more.
  communicators_.SessionClosed(ranks_[1].session->id());
  rank0.join();
  rank2.join();
  sender.join();
  stats = communicators_.Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_NE(stats[0].aborted.message().find("rank 1 (pid"), std::string::npos)
      << stats[0].aborted;
  EXPECT_TRUE(stats[0].pending.empty());
  EXPECT_FALSE(stats[0].members[1].joined);
}

TEST_F(CollectiveEngineTest,
       AFlippedContributionReachesEveryRankAndAFlippedDeliveryOnlyOne) {
  FaultInjector faults(devices_.get(), /*profile_commands=*/false);
  faults.SetCollectiveRunner(&engine_);
  executor_->SetFaultHook(&faults);
  MakeRanks(2);
  // Rank 1 described itself as c10d's default group: "0", "default_pg".
  proto::FlightRecorderIdentity identity;
  identity.set_group_name("0");
  identity.set_group_desc("default_pg");
  identity.set_entries(10);
  for (int r = 0; r < 2; ++r) {
    communicators_.Find(ranks_[r].session->id(), ranks_[r].communicator)
        ->communicator->recorder()
        .Describe(r, identity);
  }
  absl::StatusOr<proto::FaultPlan> plan = faults::ParseFaultPlan(R"({"faults": [
      {"daemon_wide": true, "corrupt_input": {"bits": [31], "element": 2},
       "trigger": {"kind": "collective", "op": "all_reduce",
                   "group": "default_pg", "rank": 1, "collective_number": 0}},
      {"daemon_wide": true, "corrupt_output": {"bits": [31], "element": 0},
       "trigger": {"kind": "collective", "group": "0", "rank": 0,
                   "collective_number": 1}},
      {"daemon_wide": true, "corrupt_input": {"bits": [31]},
       "trigger": {"kind": "collective", "group": "1"}},
      {"daemon_wide": true, "corrupt_input": {"bits": [31]},
       "trigger": {"kind": "collective", "op": "broadcast"}}]})");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(faults.Arm(*plan, nullptr).ok());
  const uint64_t a0 = Alloc(0, 16), a1 = Alloc(1, 16);
  Upload<float>(0, a0, {1, 2, 3, 4});
  Upload<float>(1, a1, {1, 2, 3, 4});
  // Rank 1's 3 read as -3: every rank sums it.
  for (const auto& error :
       RunAll({Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0),
               Collective(1, proto::ALL_REDUCE, kFloat, 4, a1, a1)})) {
    EXPECT_EQ(error, std::nullopt);
  }
  EXPECT_EQ(Download<float>(0, a0, 4), (std::vector<float>{2, 4, 0, 8}));
  EXPECT_EQ(Download<float>(1, a1, 4), (std::vector<float>{2, 4, 0, 8}));
  // Only rank 0 receives a flipped sign.
  for (const auto& error :
       RunAll({Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0),
               Collective(1, proto::ALL_REDUCE, kFloat, 4, a1, a1)})) {
    EXPECT_EQ(error, std::nullopt);
  }
  EXPECT_EQ(Download<float>(0, a0, 4), (std::vector<float>{-4, 8, 0, 16}));
  EXPECT_EQ(Download<float>(1, a1, 4), (std::vector<float>{4, 8, 0, 16}));
  uint64_t next = 0, dropped = 0;
  const std::vector<proto::FaultRecord> records =
      faults.log().Read(0, &next, &dropped);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].model(), "corrupt_input");
  EXPECT_EQ(records[0].command(), "occl::all_reduce");
  EXPECT_EQ(records[0].group(), "0");
  EXPECT_EQ(records[0].rank(), 1);
  EXPECT_EQ(records[0].value_before(), "3");
  EXPECT_EQ(records[0].value_after(), "-3");
  EXPECT_EQ(records[1].model(), "corrupt_output");
  EXPECT_EQ(records[1].rank(), 0);
  EXPECT_EQ(records[1].element(), 0);
  executor_->SetFaultHook(nullptr);
}

TEST_F(CollectiveEngineTest, ACollectiveAFaultFailedTaintsItsStreamToo) {
  FaultInjector faults(devices_.get(), /*profile_commands=*/false);
  faults.SetCollectiveRunner(&engine_);
  executor_->SetFaultHook(&faults);
  MakeRanks(2, /*timeout=*/absl::Milliseconds(300));
  // No disconnect handler: the fault fails rank 1's collective without
  // dropping its session.
  absl::StatusOr<proto::FaultPlan> plan = faults::ParseFaultPlan(R"({
      "daemon_wide": true, "disconnect": {},
      "trigger": {"kind": "collective", "rank": 1}})");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(faults.Arm(*plan, nullptr).ok());
  const uint64_t a0 = Alloc(0, 16), a1 = Alloc(1, 16);
  const auto errors =
      RunAll({Collective(0, proto::ALL_REDUCE, kFloat, 4, a0, a0),
              Collective(1, proto::ALL_REDUCE, kFloat, 4, a1, a1)});
  ASSERT_TRUE(errors[1].has_value());
  EXPECT_EQ(errors[1]->code, proto::DEVICE_LOST);
  // What waits for rank 1's collective inherits its failure.
  const absl::Status inherited =
      ranks_[1].session->taints().Check(0, errors[1]->sequence);
  EXPECT_FALSE(inherited.ok());
  EXPECT_NE(inherited.message().find("dropped this session"), std::string::npos)
      << inherited;
  executor_->SetFaultHook(nullptr);
}

}  // namespace
}  // namespace openreg::daemon
