// The decode side of one launch (launch_decoder.h) on session memory: an
// output named by an argument is that argument's tensor while the kernel
// leaves it as the client sent it, and out= arguments get stand-ins
// (out_arguments.h) that alias the client's memory.
#include "device_daemon/kernels/launch_decoder.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/kernels/out_arguments.h"
#include "device_daemon/sessions/session.h"
#include "protos/commands.pb.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int64_t kElements = 256;
constexpr uint64_t kBytes = kElements * 4;
constexpr int kFloat = 6;  // c10::ScalarType::Float

class LaunchDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = *Devices::Create(1, 8 << 20);
    session_ = MakeTestSession(1, devices_.get(), nullptr);
    context_.session = session_.get();
    x_ = Allocate(1.0F);
    y_ = Allocate(2.0F);
  }

  uint64_t Allocate(float value) {
    const uint64_t address = *session_->Allocate(0, kBytes);
    float* data = Data(address);
    for (int64_t i = 0; i < kElements; ++i) data[i] = value;
    return address;
  }
  float* Data(uint64_t address) {
    return reinterpret_cast<float*>(session_->PinRange(address, kBytes)->data);
  }
  static void Ref(uint64_t address, proto::TensorRef* ref) {
    ref->set_address(address);
    ref->add_sizes(kElements);
    ref->add_strides(1);
    ref->set_dtype(kFloat);
  }
  // `x.add_(y)`, or `add.out(x, y, out=x)` when `out` is set.
  proto::LaunchOp AddInto(uint64_t destination, bool out) {
    proto::LaunchOp op;
    op.set_name(out ? "aten::add" : "aten::add_");
    op.set_overload(out ? "out" : "Tensor");
    Ref(x_, op.add_arguments()->mutable_tensor());
    Ref(y_, op.add_arguments()->mutable_tensor());
    op.add_arguments()->set_int_value(1);
    if (out) Ref(destination, op.add_arguments()->mutable_tensor());
    Ref(destination, op.add_outputs());
    return op;
  }
  static const c10::FunctionSchema& Schema(const proto::LaunchOp& op) {
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow(op.name().c_str(), op.overload().c_str())
        .schema();
  }

  c10::InferenceMode inference_mode_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<Session> session_;
  StreamContext context_;
  uint64_t x_ = 0, y_ = 0;
};

TEST_F(LaunchDecoderTest, AnOutputNamedByAnArgumentIsThatArgumentsTensor) {
  const proto::LaunchOp op = AddInto(x_, /*out=*/false);
  LaunchDecoder decoder(context_, op);
  absl::StatusOr<torch::jit::Stack> stack = decoder.BuildStack(Schema(op));
  ASSERT_TRUE(stack.ok()) << stack.status();
  ASSERT_TRUE(decoder.ValidateOutputs().ok());
  absl::StatusOr<at::Tensor> output = decoder.OutputTensor(op.outputs(0));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(output->is_same((*stack)[0].toTensor()));
}

TEST_F(LaunchDecoderTest, AnOutputNamedByNoArgumentIsDecodedOnItsOwn) {
  const uint64_t out = Allocate(0.0F);
  const proto::LaunchOp op = AddInto(out, /*out=*/false);
  LaunchDecoder decoder(context_, op);
  absl::StatusOr<torch::jit::Stack> stack = decoder.BuildStack(Schema(op));
  ASSERT_TRUE(stack.ok()) << stack.status();
  absl::StatusOr<at::Tensor> output = decoder.OutputTensor(op.outputs(0));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_FALSE(output->is_same((*stack)[0].toTensor()));
  EXPECT_EQ(output->data_ptr(), Data(out));
}

TEST_F(LaunchDecoderTest, AnOutputOfTheSameMemoryInAnotherShapeIsItsOwnTensor) {
  proto::LaunchOp op = AddInto(x_, /*out=*/false);
  proto::TensorRef* output = op.mutable_outputs(0);
  output->clear_sizes();
  output->clear_strides();
  for (int64_t size : {16, 16}) output->add_sizes(size);
  for (int64_t stride : {16, 1}) output->add_strides(stride);
  LaunchDecoder decoder(context_, op);
  absl::StatusOr<torch::jit::Stack> stack = decoder.BuildStack(Schema(op));
  ASSERT_TRUE(stack.ok()) << stack.status();
  absl::StatusOr<at::Tensor> decoded = decoder.OutputTensor(op.outputs(0));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_FALSE(decoded->is_same((*stack)[0].toTensor()));
  EXPECT_EQ(decoded->sizes(), c10::IntArrayRef({16, 16}));
}

TEST_F(LaunchDecoderTest,
       AnArgumentTheKernelReshapedIsDecodedAgainAsItsOutput) {
  const proto::LaunchOp op = AddInto(x_, /*out=*/false);
  LaunchDecoder decoder(context_, op);
  absl::StatusOr<torch::jit::Stack> stack = decoder.BuildStack(Schema(op));
  ASSERT_TRUE(stack.ok()) << stack.status();
  // As an in-place kernel that changes self's metadata would.
  const int64_t sizes[] = {16, 16};
  const int64_t strides[] = {16, 1};
  (*stack)[0].toTensor().unsafeGetTensorImpl()->set_sizes_and_strides(sizes,
                                                                      strides);
  absl::StatusOr<at::Tensor> output = decoder.OutputTensor(op.outputs(0));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_FALSE(output->is_same((*stack)[0].toTensor()));
  EXPECT_EQ(output->sizes(), c10::IntArrayRef({kElements}));
  EXPECT_EQ(output->data_ptr(), Data(x_));
}

TEST_F(LaunchDecoderTest, ALaunchOfLongListsDecodesItsOutputsAfresh) {
  // cat(17 x [x], out=x): outputs x arguments comparisons would grow with
  // the lists, so past kMostArgumentsSearched nothing is searched.
  proto::LaunchOp op;
  op.set_name("aten::cat");
  op.set_overload("out");
  proto::OptionalTensorList* list = op.add_arguments()->mutable_tensor_list();
  for (size_t i = 0; i <= LaunchDecoder::kMostArgumentsSearched; ++i) {
    Ref(x_, list->add_values()->mutable_tensor());
  }
  op.add_arguments()->set_int_value(0);
  Ref(x_, op.add_arguments()->mutable_tensor());
  Ref(x_, op.add_outputs());
  LaunchDecoder decoder(context_, op);
  absl::StatusOr<torch::jit::Stack> stack = decoder.BuildStack(Schema(op));
  ASSERT_TRUE(stack.ok()) << stack.status();
  ASSERT_TRUE(decoder.ValidateOutputs().ok());
  absl::StatusOr<at::Tensor> output = decoder.OutputTensor(op.outputs(0));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_FALSE(output->is_same((*stack)[2].toTensor()));
  for (const at::Tensor& element : (*stack)[0].toTensorVector()) {
    EXPECT_FALSE(output->is_same(element));
  }
  EXPECT_EQ(output->data_ptr(), Data(x_));
}

TEST_F(LaunchDecoderTest, AnOutputNamedByNoArgumentIsStillChecked) {
  proto::LaunchOp op = AddInto(x_, /*out=*/false);
  op.mutable_outputs(0)->set_address(x_ + (64ULL << 20));  // not allocated
  LaunchDecoder decoder(context_, op);
  ASSERT_TRUE(decoder.BuildStack(Schema(op)).ok());
  const absl::Status valid = decoder.ValidateOutputs();
  EXPECT_FALSE(valid.ok());
  EXPECT_NE(valid.message().find("output"), absl::string_view::npos) << valid;
}

TEST_F(LaunchDecoderTest, InPlaceAndOutEqualToAnInputLaunchesWriteTheInput) {
  AtenOpRunner runner;
  ASSERT_TRUE(
      runner.Run(context_, AddInto(x_, /*out=*/false), 1, nullptr).ok());
  EXPECT_EQ(Data(x_)[kElements - 1], 3.0F);  // x += y
  ASSERT_TRUE(runner.Run(context_, AddInto(x_, /*out=*/true), 2, nullptr).ok());
  EXPECT_EQ(Data(x_)[0], 5.0F);  // add(x, y, out=x)
}

TEST_F(LaunchDecoderTest, AStandInAliasesTheClientsMemoryAndMayGrow) {
  const at::Tensor client =
      at::from_blob(Data(x_), {8, 16}, {1, 8}, at::kFloat)
          .as_strided({4, 16}, {1, 8}, /*storage_offset=*/3);
  torch::jit::Stack stack = {client, client, 1, client};
  const proto::LaunchOp op = AddInto(x_, /*out=*/true);
  OutArguments out_arguments;
  ReplaceOutArguments(Schema(op), &stack, &out_arguments);
  ASSERT_EQ(out_arguments.size(), 1u);
  at::Tensor stand_in = stack[3].toTensor();
  EXPECT_FALSE(stand_in.is_same(client));
  EXPECT_EQ(stand_in.data_ptr(), client.data_ptr());
  EXPECT_EQ(stand_in.sizes(), client.sizes());
  EXPECT_EQ(stand_in.strides(), client.strides());
  EXPECT_EQ(stand_in.storage_offset(), 3);
  EXPECT_EQ(stand_in.dtype(), client.dtype());
  // Growing past the client's memory moves the stand-in, not the client.
  stand_in.resize_({kElements * 4});
  EXPECT_NE(stand_in.data_ptr(), client.data_ptr());
  EXPECT_EQ(client.sizes(), c10::IntArrayRef({4, 16}));
}

}  // namespace
}  // namespace openreg::daemon
