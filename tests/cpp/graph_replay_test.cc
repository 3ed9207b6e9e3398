// Captured graphs in the daemon (docs/GRAPHS.md) without libtorch: the
// registry checks recorded commands once and keeps them per session, and
// the command executor replays them as one command, each recorded command
// through the same checks and fault hook as a command from the ring.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/graphs/graph_registry.h"
#include "device_daemon/sessions/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

// Records each launch and the generator draw it ran with.
class RecordingOpRunner : public OpRunner {
 public:
  absl::Status Run(const StreamContext&, const proto::LaunchOp& op, uint64_t,
                   WrittenTensors*) override {
    absl::MutexLock lock(&mutex_);
    names_.push_back(op.name());
    if (op.has_default_generator()) draws_.push_back(op.default_generator());
    if (op.name() == "fake::fails") {
      return KernelFailureError("fake::fails failed: as asked");
    }
    return absl::OkStatus();
  }
  std::vector<std::string> names() {
    absl::MutexLock lock(&mutex_);
    return names_;
  }
  std::vector<proto::GeneratorState> draws() {
    absl::MutexLock lock(&mutex_);
    return draws_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<std::string> names_;
  std::vector<proto::GeneratorState> draws_;
};

// Counts the commands the fault hook saw, by name.
class CountingHook : public FaultHook {
 public:
  bool active() const override { return true; }
  absl::Status BeforeCommand(const StreamContext&,
                             const proto::Command& command,
                             bool* run_after) override {
    absl::MutexLock lock(&mutex_);
    seen_.push_back(CommandName(command));
    *run_after = false;
    if (CommandName(command) == "fake::refused") {
      return KernelFailureError("refused by the hook");
    }
    return absl::OkStatus();
  }
  void AfterCommand(const StreamContext&, const proto::Command&,
                    const WrittenTensors&, absl::Duration,
                    absl::Status*) override {}
  absl::Status BeforeAllocate(Session&, int, uint64_t) override {
    return absl::OkStatus();
  }
  void SessionClosed(uint64_t) override {}
  std::vector<std::string> seen() {
    absl::MutexLock lock(&mutex_);
    return seen_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<std::string> seen_;
};

std::string Recorded(uint64_t sequence, const std::string& name) {
  proto::Command command;
  command.set_sequence(sequence);
  command.mutable_launch()->set_name(name);
  return command.SerializeAsString();
}

class GraphReplayTest : public ::testing::Test {
 protected:
  GraphReplayTest() {
    devices_ = *Devices::Create(2, 16 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &runner_);
    executor_->SetGraphStore(&graphs_);
    session_ = MakeTestSession(1, devices_.get(), executor_.get());
  }
  ~GraphReplayTest() override { session_->Close(); }

  StreamDriver Driver(uint32_t slot) {
    return StreamDriver(session_->stream_slot(slot),
                        session_->ring_buffer(slot),
                        session_->limits().ring_bytes,
                        devices_->doorbell(session_->stream_slot(slot)->device),
                        session_->ring_fd(session_->stream_slot(slot)->device));
  }

  static proto::Command Replay(uint64_t graph) {
    proto::Command command;
    command.mutable_replay_graph()->set_graph(graph);
    return command;
  }

  RecordingOpRunner runner_;
  GraphRegistry graphs_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
};

TEST_F(GraphReplayTest, AReplayRunsTheRecordedCommandsInOrderEachTime) {
  absl::StatusOr<uint64_t> graph = graphs_.Create(
      session_->id(), 0,
      {Recorded(1, "fake::a"), Recorded(2, "fake::b"), Recorded(3, "fake::c")},
      0);
  ASSERT_TRUE(graph.ok()) << graph.status();
  StreamDriver stream = Driver(0);
  ASSERT_EQ(stream.Run(Replay(*graph)), std::nullopt);
  ASSERT_EQ(stream.Run(Replay(*graph)), std::nullopt);
  EXPECT_EQ(runner_.names(),
            (std::vector<std::string>{"fake::a", "fake::b", "fake::c",
                                      "fake::a", "fake::b", "fake::c"}));
  EXPECT_EQ(devices_->counters(0).graphs_replayed.load(), 2u);
  EXPECT_EQ(devices_->counters(0).kernels_executed.load(), 6u);
}

TEST_F(GraphReplayTest, TheFirstFailureEndsTheReplayNamingTheRecordedCommand) {
  absl::StatusOr<uint64_t> graph =
      graphs_.Create(session_->id(), 0,
                     {Recorded(1, "fake::a"), Recorded(2, "fake::fails"),
                      Recorded(3, "fake::never")},
                     0);
  ASSERT_TRUE(graph.ok()) << graph.status();
  StreamDriver stream = Driver(0);
  std::optional<StreamErrorRecord> error = stream.Run(Replay(*graph));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_EQ(error->op, "graph_replay");
  EXPECT_NE(error->message.find("as asked"), std::string::npos);
  EXPECT_NE(error->message.find("recorded command 2 of 3, fake::fails"),
            std::string::npos)
      << error->message;
  EXPECT_EQ(runner_.names(),
            (std::vector<std::string>{"fake::a", "fake::fails"}));
}

TEST_F(GraphReplayTest, TheFaultHookSeesEveryRecordedCommand) {
  CountingHook hook;
  executor_->SetFaultHook(&hook);
  absl::StatusOr<uint64_t> graph =
      graphs_.Create(session_->id(), 0,
                     {Recorded(1, "fake::a"), Recorded(2, "fake::refused"),
                      Recorded(3, "fake::c")},
                     0);
  ASSERT_TRUE(graph.ok()) << graph.status();
  StreamDriver stream = Driver(0);
  std::optional<StreamErrorRecord> error = stream.Run(Replay(*graph));
  executor_->SetFaultHook(nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("refused by the hook"), std::string::npos);
  EXPECT_EQ(hook.seen(), (std::vector<std::string>{"graph_replay", "fake::a",
                                                   "fake::refused"}));
  EXPECT_EQ(runner_.names(), std::vector<std::string>{"fake::a"});
}

TEST_F(GraphReplayTest, EachReplayRunsRandomOpsWithItsOwnDraw) {
  proto::Command random;
  random.set_sequence(1);
  random.mutable_launch()->set_name("fake::random");
  random.mutable_launch()->mutable_default_generator()->set_offset(3);
  random.mutable_launch()->mutable_default_generator()->set_graph_generator(1);
  absl::StatusOr<uint64_t> graph =
      graphs_.Create(session_->id(), 0, {random.SerializeAsString()}, 1);
  ASSERT_TRUE(graph.ok()) << graph.status();
  StreamDriver stream = Driver(0);
  for (uint64_t base : {100, 200}) {
    proto::Command replay = Replay(*graph);
    proto::GeneratorState* draw =
        replay.mutable_replay_graph()->add_generators();
    draw->set_seed(42);
    draw->set_offset(base);
    ASSERT_EQ(stream.Run(replay), std::nullopt);
  }
  const std::vector<proto::GeneratorState> draws = runner_.draws();
  ASSERT_EQ(draws.size(), 2u);
  EXPECT_EQ(draws[0].seed(), 42u);
  EXPECT_EQ(draws[0].offset(), 103u);
  EXPECT_EQ(draws[1].offset(), 203u);
  EXPECT_EQ(draws[1].graph_generator(), 0u);
  // A replay that passes no draw is refused before anything runs.
  std::optional<StreamErrorRecord> error = stream.Run(Replay(*graph));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("registered 1 generators"), std::string::npos);
}

TEST_F(GraphReplayTest, CreateRefusesWhatAGraphCannotHold) {
  proto::Command synchronous;
  synchronous.set_sequence(1);
  synchronous.mutable_launch()->set_name("fake::sync");
  synchronous.mutable_launch()->set_synchronous(true);
  proto::Command staged;
  staged.set_sequence(1);
  staged.mutable_h2d()->set_dst(1);
  proto::Command wait;
  wait.set_sequence(1);
  wait.mutable_wait_stream()->set_stream_slot(2);
  proto::Command collective;
  collective.set_sequence(1);
  collective.mutable_collective()->set_kind(proto::ALL_REDUCE);
  const struct {
    std::vector<std::string> commands;
    std::string message;
  } cases[] = {
      {{"\xff\xff not a command"}, "recorded command 1 is malformed"},
      {{Recorded(2, "fake::a")}, "has sequence 2, not 1"},
      {{synchronous.SerializeAsString()}, "synchronous launch"},
      {{staged.SerializeAsString()}, "through staging"},
      {{wait.SerializeAsString()}, "cannot record wait_stream"},
      {{collective.SerializeAsString()}, "cannot record occl::all_reduce"},
  };
  for (const auto& bad : cases) {
    absl::StatusOr<uint64_t> graph =
        graphs_.Create(session_->id(), 0, bad.commands, 0);
    ASSERT_FALSE(graph.ok()) << bad.message;
    EXPECT_EQ(ErrorCodeOf(graph.status()), proto::INVALID_VALUE);
    EXPECT_NE(graph.status().message().find(bad.message), std::string::npos)
        << graph.status();
  }
  proto::Command draws_two;
  draws_two.set_sequence(1);
  draws_two.mutable_launch()->mutable_default_generator()->set_graph_generator(
      2);
  EXPECT_FALSE(
      graphs_.Create(session_->id(), 0, {draws_two.SerializeAsString()}, 1)
          .ok());
}

TEST_F(GraphReplayTest, AGraphBelongsToItsSessionAndGoesWithIt) {
  absl::StatusOr<uint64_t> graph =
      graphs_.Create(session_->id(), 1, {Recorded(1, "fake::a")}, 0);
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ(graphs_.CountOnDevice(1), 1u);
  EXPECT_EQ(ErrorCodeOf(graphs_.Find(session_->id() + 1, *graph).status()),
            proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(graphs_.Destroy(session_->id() + 1, *graph)),
            proto::INVALID_HANDLE);
  // Replayed on a stream of another device: refused, naming both.
  StreamDriver stream = Driver(0);
  std::optional<StreamErrorRecord> error = stream.Run(Replay(*graph));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("captured on openreg:1"), std::string::npos);
  executor_->SessionClosed(session_->id());
  EXPECT_EQ(graphs_.CountOnDevice(1), 0u);
  EXPECT_EQ(ErrorCodeOf(graphs_.Find(session_->id(), *graph).status()),
            proto::INVALID_HANDLE);
}

TEST_F(GraphReplayTest, LimitsAreResourceExhaustedNamingTheLimit) {
  GraphLimits limits;
  limits.graphs_per_session = 1;
  limits.commands_per_graph = 2;
  GraphRegistry small(limits);
  EXPECT_EQ(
      ErrorCodeOf(
          small
              .Create(1, 0,
                      {Recorded(1, "a"), Recorded(2, "b"), Recorded(3, "c")}, 0)
              .status()),
      proto::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(small.Create(1, 0, {Recorded(1, "a")}, 0).ok());
  absl::StatusOr<uint64_t> second = small.Create(1, 0, {Recorded(1, "a")}, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(ErrorCodeOf(second.status()), proto::RESOURCE_EXHAUSTED);
  EXPECT_NE(second.status().message().find("at most 1 graphs"),
            std::string::npos);
}

}  // namespace
}  // namespace openreg::daemon
