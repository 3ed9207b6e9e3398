// The client's ring encoding (runtime_client/command_encoding.h): the
// hand-built encoding of a launch parses with the generated parser into the
// command it stands for and, where it follows protobuf's field order, is
// byte for byte what SerializeToString writes; every other command kind is
// the generated serialization.
#include "runtime_client/command_encoding.h"

#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "protos/commands.pb.h"
#include "runtime_client/command_phase.h"
#include "tests/cpp/command_generator.h"

namespace openreg::client {
namespace {

using google::protobuf::util::MessageDifferencer;

constexpr uint64_t kBufferBytes = 1 << 20;
constexpr int kRandomLaunches = 200;

const proto::CommandPhase kPhases[] = {proto::FORWARD, proto::BACKWARD,
                                       proto::OPTIMIZER};

// Restores the thread's phase (forward) whatever a test set.
class CommandEncodingTest : public ::testing::Test {
 protected:
  ~CommandEncodingTest() override { SetThreadCommandPhase(0); }
};

// The command EncodeLaunchCommand(sequence, op, force_synchronous) stands
// for when the thread's phase is `phase`.
proto::Command LaunchCommand(uint64_t sequence, const proto::LaunchOp& op,
                             bool force_synchronous,
                             proto::CommandPhase phase) {
  proto::Command command;
  command.set_sequence(sequence);
  command.set_phase(phase);
  *command.mutable_launch() = op;
  if (force_synchronous) command.mutable_launch()->set_synchronous(true);
  return command;
}

proto::Command Parse(absl::string_view bytes) {
  proto::Command parsed;
  EXPECT_TRUE(parsed.ParseFromArray(bytes.data(), bytes.size()));
  return parsed;
}

std::string Serialized(const proto::Command& command) {
  std::string bytes;
  EXPECT_TRUE(command.SerializeToString(&bytes));
  return bytes;
}

// An op with every LaunchOp field set, the ones after `synchronous` too.
proto::LaunchOp FullOp() {
  proto::LaunchOp op;
  op.set_name("aten::add");
  op.set_overload("Tensor");
  op.add_arguments()->mutable_tensor()->set_address(0x1000);
  op.add_arguments()->set_double_value(2.5);
  op.add_outputs()->set_address(0x2000);
  op.mutable_default_generator()->set_seed(7);
  op.mutable_default_generator()->set_offset(8);
  op.mutable_settings()->set_deterministic_algorithms(true);
  return op;
}

std::vector<proto::LaunchOp> Ops() {
  std::vector<proto::LaunchOp> ops = {proto::LaunchOp(), FullOp()};
  proto::LaunchOp synchronous = FullOp();
  synchronous.set_synchronous(true);
  ops.push_back(synchronous);
  CommandGenerator generator(/*seed=*/1, {0x10000}, kBufferBytes);
  for (int i = 0; i < kRandomLaunches; ++i) {
    ops.push_back(generator.Launch().launch());
  }
  return ops;
}

TEST_F(CommandEncodingTest, LaunchIsTheGeneratedSerialization) {
  for (proto::CommandPhase phase : kPhases) {
    SetThreadCommandPhase(phase);
    for (uint64_t sequence : {uint64_t{1}, uint64_t{300}, ~uint64_t{0}}) {
      for (const proto::LaunchOp& op : Ops()) {
        const proto::Command expected =
            LaunchCommand(sequence, op, /*force_synchronous=*/false, phase);
        const absl::string_view encoded =
            EncodeLaunchCommand(sequence, op, /*force_synchronous=*/false);
        EXPECT_EQ(encoded, Serialized(expected)) << op.DebugString();
        EXPECT_TRUE(MessageDifferencer::Equals(Parse(encoded), expected));
      }
    }
  }
}

TEST_F(CommandEncodingTest, SerializedLaunchIsTheSameBytesAsItsMessage) {
  // An op already serialized (op_codec/launch_writer.h) is wrapped exactly
  // as its message is, phase and sequence included.
  for (proto::CommandPhase phase : kPhases) {
    SetThreadCommandPhase(phase);
    for (uint64_t sequence : {uint64_t{1}, uint64_t{300}, ~uint64_t{0}}) {
      for (const proto::LaunchOp& op : Ops()) {
        const std::string message_bytes(
            EncodeLaunchCommand(sequence, op, /*force_synchronous=*/false));
        EXPECT_EQ(
            EncodeSerializedLaunchCommand(sequence, op.SerializeAsString()),
            message_bytes)
            << op.DebugString();
      }
    }
  }
}

TEST_F(CommandEncodingTest, ForcedSynchronousLaunchParsesAsSynchronous) {
  for (proto::CommandPhase phase : kPhases) {
    SetThreadCommandPhase(phase);
    for (const proto::LaunchOp& op : Ops()) {
      const proto::Command expected =
          LaunchCommand(42, op, /*force_synchronous=*/true, phase);
      const proto::Command parsed =
          Parse(EncodeLaunchCommand(42, op, /*force_synchronous=*/true));
      EXPECT_TRUE(MessageDifferencer::Equals(parsed, expected))
          << parsed.DebugString() << "\nexpected:\n"
          << expected.DebugString();
    }
  }
}

TEST_F(CommandEncodingTest, ForcedSynchronousInFieldOrderIsTheSameBytes) {
  // Without the fields numbered after `synchronous`, the appended field
  // stands where protobuf writes it.
  proto::LaunchOp op;
  op.set_name("aten::mm");
  op.add_arguments()->mutable_tensor()->set_address(0x1000);
  op.add_outputs()->set_address(0x2000);
  SetThreadCommandPhase(proto::BACKWARD);
  EXPECT_EQ(EncodeLaunchCommand(9, op, /*force_synchronous=*/true),
            Serialized(LaunchCommand(9, op, /*force_synchronous=*/true,
                                     proto::BACKWARD)));
}

TEST_F(CommandEncodingTest, EveryCommandKindIsTheGeneratedSerialization) {
  CommandGenerator generator(/*seed=*/2, {0x10000}, kBufferBytes);
  std::vector<proto::Command> commands;
  for (int i = 0; i < kRandomLaunches; ++i) {
    commands.push_back(generator.Launch());
    commands.push_back(generator.Other());
  }
  proto::Command ipc_wait;
  ipc_wait.set_sequence(5);
  ipc_wait.set_phase(proto::OPTIMIZER);
  ipc_wait.mutable_wait_ipc_event()->set_event_slot(3);
  ipc_wait.mutable_wait_ipc_event()->set_generation(4);
  commands.push_back(ipc_wait);
  proto::Command free;
  free.set_sequence(6);
  free.mutable_free()->set_address(0x3000);
  free.mutable_free()->add_fences()->set_stream_slot(2);
  commands.push_back(free);
  for (const proto::Command& command : commands) {
    const absl::string_view encoded = EncodeCommand(command);
    EXPECT_EQ(encoded, Serialized(command)) << command.DebugString();
    EXPECT_TRUE(MessageDifferencer::Equals(Parse(encoded), command));
  }
}

}  // namespace
}  // namespace openreg::client
