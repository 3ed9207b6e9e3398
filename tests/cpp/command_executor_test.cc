// The command executor and sessions build and run without libtorch: op
// launches reach an OpRunner interface, here a fake that records them.
#include "device_daemon/command_executor.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "device_daemon/devices.h"
#include "device_daemon/errors.h"
#include "device_daemon/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

class RecordingOpRunner : public OpRunner {
 public:
  struct Call {
    std::string name;
    uint64_t sequence;
    int device;
  };

  absl::Status Run(const StreamContext& context, const proto::LaunchOp& op,
                   uint64_t sequence, WrittenTensors* written) override {
    absl::MutexLock lock(&mutex_);
    calls_.push_back({op.name(), sequence, context.device});
    if (op.name() == "fake::fails") {
      return KernelFailureError("fake::fails failed: as asked");
    }
    if (written != nullptr) {
      written->assign(op.outputs().begin(), op.outputs().end());
    }
    return absl::OkStatus();
  }

  std::vector<Call> calls() {
    absl::MutexLock lock(&mutex_);
    return calls_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<Call> calls_;
};

proto::Command Launch(const std::string& name) {
  proto::Command command;
  command.mutable_launch()->set_name(name);
  return command;
}

class CommandExecutorTest : public ::testing::Test {
 protected:
  CommandExecutorTest() {
    devices_ = *Devices::Create(2, 16 << 20);
    executor_ = std::make_unique<CommandExecutor>(devices_.get(), &runner_);
    session_ = MakeTestSession(1, devices_.get(), executor_.get());
  }
  ~CommandExecutorTest() override { session_->Close(); }

  StreamDriver Driver(uint32_t slot) {
    return StreamDriver(session_->stream_slot(slot),
                        session_->ring_buffer(slot),
                        session_->limits().ring_bytes);
  }

  RecordingOpRunner runner_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<CommandExecutor> executor_;
  std::unique_ptr<Session> session_;
};

TEST_F(CommandExecutorTest, LaunchesReachTheOpRunnerInStreamOrder) {
  StreamDriver stream = Driver(1);  // device 1's default stream
  ASSERT_EQ(stream.Run(Launch("fake::first")), std::nullopt);
  ASSERT_EQ(stream.Run(Launch("fake::second")), std::nullopt);
  const std::vector<RecordingOpRunner::Call> calls = runner_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "fake::first");
  EXPECT_EQ(calls[1].name, "fake::second");
  EXPECT_LT(calls[0].sequence, calls[1].sequence);
  EXPECT_EQ(calls[0].device, 1);
  EXPECT_EQ(devices_->counters(1).kernels_executed.load(), 2u);
  EXPECT_EQ(devices_->counters(0).kernels_executed.load(), 0u);
}

TEST_F(CommandExecutorTest, ARunnerFailureBecomesTheStreamsErrorRecord) {
  StreamDriver stream = Driver(0);
  std::optional<StreamErrorRecord> error = stream.Run(Launch("fake::fails"));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, proto::KERNEL_FAILURE);
  EXPECT_EQ(error->op, "fake::fails");
  EXPECT_NE(error->message.find("as asked"), std::string::npos);
  EXPECT_EQ(devices_->counters(0).kernel_failures.load(), 1u);
  // The stream goes on.
  EXPECT_EQ(stream.Run(Launch("fake::after")), std::nullopt);
}

TEST_F(CommandExecutorTest, NonKernelCommandsNeverReachTheRunner) {
  StreamDriver stream = Driver(0);
  absl::StatusOr<uint64_t> address = session_->Allocate(0, 256);
  ASSERT_TRUE(address.ok()) << address.status();
  proto::Command memset;
  memset.mutable_memset()->set_dst(*address);
  memset.mutable_memset()->set_value(7);
  memset.mutable_memset()->set_size(256);
  ASSERT_EQ(stream.Run(memset), std::nullopt);
  proto::Command free;
  free.mutable_free()->set_address(*address);
  ASSERT_EQ(stream.Run(free), std::nullopt);
  EXPECT_TRUE(runner_.calls().empty());
}

}  // namespace
}  // namespace openreg::daemon
