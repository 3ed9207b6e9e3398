// A graph's recorded launch decoded once (decoded_launch.h): AtenOpRunner::
// RunRepeated on session memory, as a replay runs it.
#include "device_daemon/kernels/decoded_launch.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/sessions/session.h"
#include "protos/commands.pb.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int64_t kElements = 256;
constexpr uint64_t kBytes = kElements * 4;
constexpr int kFloat = 6;  // c10::ScalarType::Float

class DecodedLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = *Devices::Create(1, 8 << 20);
    session_ = MakeTestSession(1, devices_.get(), nullptr);
    context_.session = session_.get();
    x_ = Allocate(1.0F);
    y_ = Allocate(2.0F);
    out_ = Allocate(0.0F);
    // out = x + y
    add_.set_name("aten::add");
    add_.set_overload("Tensor");
    Ref(x_, add_.add_arguments()->mutable_tensor());
    Ref(y_, add_.add_arguments()->mutable_tensor());
    add_.add_arguments()->set_int_value(1);
    Ref(out_, add_.add_outputs());
  }

  uint64_t Allocate(float value) {
    const uint64_t address = *session_->Allocate(0, kBytes);
    Fill(address, value);
    return address;
  }
  float* Data(uint64_t address) {
    return reinterpret_cast<float*>(session_->PinRange(address, kBytes)->data);
  }
  void Fill(uint64_t address, float value) {
    float* data = Data(address);
    for (int64_t i = 0; i < kElements; ++i) data[i] = value;
  }
  static void Ref(uint64_t address, proto::TensorRef* ref) {
    ref->set_address(address);
    ref->add_sizes(kElements);
    ref->add_strides(1);
    ref->set_dtype(kFloat);
  }
  absl::Status Run() {
    return runner_.RunRepeated(context_, add_, 1, nullptr, &prepared_);
  }
  uint64_t Decoded() const {
    return devices_->counters(0).graph_launches_decoded.load();
  }
  uint64_t Reused() const {
    return devices_->counters(0).graph_launches_reused.load();
  }
  uint64_t Pointwise() const {
    return devices_->counters(0).graph_launches_pointwise.load();
  }

  std::unique_ptr<Devices> devices_;
  std::unique_ptr<Session> session_;
  StreamContext context_;
  AtenOpRunner runner_;
  uint64_t x_ = 0, y_ = 0, out_ = 0;
  proto::LaunchOp add_;
  std::unique_ptr<PreparedLaunch> prepared_;
};

TEST_F(DecodedLaunchTest, LaterRunsReuseTheFirstDecodeOnCurrentMemory) {
  ASSERT_TRUE(Run().ok());
  EXPECT_NE(prepared_, nullptr);
  EXPECT_EQ(Data(out_)[0], 3.0F);
  Fill(x_, 10.0F);  // a replay reads what the memory holds now
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(Data(out_)[kElements - 1], 12.0F);
  EXPECT_EQ(Decoded(), 1u);
  EXPECT_EQ(Reused(), 1u);
}

TEST_F(DecodedLaunchTest, ASmallFloatAddReplaysAsALoopOnCurrentMemory) {
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(Pointwise(), 0u);  // the decoding run is ATen's
  Fill(y_, 0.25F);
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(Pointwise(), 1u);
  EXPECT_EQ(Data(out_)[kElements - 1], 1.25F);
}

TEST_F(DecodedLaunchTest, AnAlphaOtherThanOneReplaysThroughAten) {
  add_.mutable_arguments(2)->set_int_value(2);  // out = x + 2 * y
  ASSERT_TRUE(Run().ok());
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(Reused(), 1u);
  EXPECT_EQ(Pointwise(), 0u);
  EXPECT_EQ(Data(out_)[0], 5.0F);
}

TEST_F(DecodedLaunchTest, AFreeMakesTheNextRunDecodeAgain) {
  ASSERT_TRUE(Run().ok());
  const uint64_t other = Allocate(0.0F);
  ASSERT_TRUE(session_->Free(other).ok());
  ASSERT_TRUE(Run().ok());
  EXPECT_EQ(Decoded(), 2u);
  EXPECT_EQ(Reused(), 0u);
}

TEST_F(DecodedLaunchTest, ARunOnFreedMemoryFailsNamingIt) {
  ASSERT_TRUE(Run().ok());
  ASSERT_TRUE(session_->Free(y_).ok());
  const absl::Status status = Run();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("already freed"), absl::string_view::npos)
      << status.message();
}

TEST_F(DecodedLaunchTest, ItPinsNoMemoryBetweenRuns) {
  ASSERT_TRUE(Run().ok());
  const uint64_t before = devices_->arena(0).Stats().allocated_bytes;
  ASSERT_TRUE(session_->Free(x_).ok());
  EXPECT_LT(devices_->arena(0).Stats().allocated_bytes, before);
}

TEST_F(DecodedLaunchTest, AChangedTensorShapeSpoilsIt) {
  const c10::InferenceMode inference_mode;
  proto::TensorRef ref;
  Ref(x_, &ref);
  DecodedLaunch decoded(session_->memory_generation());
  at::Tensor tensor = at::zeros({kElements});
  decoded.KeepTensor(&ref, /*growable=*/false, tensor);
  EXPECT_TRUE(decoded.Verify());
  tensor.resize_({kElements * 2});  // as an out= kernel may
  EXPECT_FALSE(decoded.Verify());
}

TEST_F(DecodedLaunchTest, AWrittenArgumentItDidNotDecodeIsNotKept) {
  const c10::InferenceMode inference_mode;
  const c10::OperatorHandle add_in_place =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add_", "Tensor");
  proto::TensorRef ref;
  Ref(x_, &ref);
  const at::Tensor device = at::zeros({kElements});
  const at::Tensor host = at::ones({kElements});
  DecodedLaunch decoded(session_->memory_generation());
  decoded.KeepTensor(&ref, /*growable=*/false, device);
  decoded.KeepStack({host, device, 1});  // writes `host`: not kept
  EXPECT_FALSE(decoded.Keepable(add_in_place.schema()));
  decoded.KeepStack({device, host, 1});  // writes `device`
  EXPECT_TRUE(decoded.Keepable(add_in_place.schema()));
}

}  // namespace
}  // namespace openreg::daemon
