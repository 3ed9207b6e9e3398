// A kernel that allocates its result gets the client's output memory for
// it (kernel_workspace.h, placement), also when its first allocation of the
// result's size is a temporary: the launch learns which allocation it
// returned and places that one next time. A list of results (a functional
// foreach op's) is placed element by element, past the learned outputs
// too.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/kernels/aten_op_runner.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/op_table.h"
#include "device_daemon/sessions/session.h"
#include "protos/commands.pb.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

constexpr int64_t kElements = 1024;
constexpr uint64_t kBytes = kElements * 4;
constexpr int kFloat = 6;  // c10::ScalarType::Float

// What the test kernel did in its last run.
bool g_allocate_temporary_first = true;
const void* g_last_result = nullptr;

// x * 2, as convolution does it: a temporary of the result's size first
// (when g_allocate_temporary_first), then the result.
at::Tensor TemporaryThenResult(const at::Tensor& x) {
  at::Tensor temporary;
  if (g_allocate_temporary_first) {
    temporary = at::empty_like(x);
    temporary.fill_(-1.0);
  }
  at::Tensor result = at::empty_like(x);
  result.copy_(x).mul_(2.0);
  g_last_result = result.data_ptr();
  return result;
}

// More results than a launch learns the placement of
// (ResolvedOp::kLearnedOutputs), all of one size.
constexpr int kListResults = 12;
std::vector<const void*> g_last_list_results;

// x * (i + 1) for each i, as a functional foreach op allocates its results:
// one per element, in order.
std::vector<at::Tensor> ScaledCopies(const at::Tensor& x) {
  std::vector<at::Tensor> results;
  g_last_list_results.clear();
  for (int i = 0; i < kListResults; ++i) {
    at::Tensor result = at::empty_like(x);
    result.copy_(x).mul_(static_cast<double>(i + 1));
    g_last_list_results.push_back(result.data_ptr());
    results.push_back(std::move(result));
  }
  return results;
}

TORCH_LIBRARY(openreg_placement_test, m) {
  m.def("temporary_then_result(Tensor x) -> Tensor");
  m.def("scaled_copies(Tensor x) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(openreg_placement_test, CPU, m) {
  m.impl("temporary_then_result", TORCH_FN(TemporaryThenResult));
  m.impl("scaled_copies", TORCH_FN(ScaledCopies));
}

TEST(KernelWorkspaceTest, TheAllocationOfTheOrdinalAskedTakesTheSlot) {
  KernelWorkspace::Install();
  std::vector<char> client(kBytes);
  std::vector<KernelWorkspace::Slot> slots(1);
  slots[0].data = client.data();
  slots[0].bytes = kBytes;
  slots[0].take_ordinal = 1;
  std::vector<c10::DataPtr> allocations;
  {
    const KernelWorkspace::Placement placement(&slots);
    c10::Allocator* allocator = c10::GetCPUAllocator();
    allocations.push_back(allocator->allocate(kBytes));
    allocations.push_back(allocator->allocate(kBytes / 2));  // other size
    allocations.push_back(allocator->allocate(kBytes));
    allocations.push_back(allocator->allocate(kBytes));
  }
  EXPECT_NE(allocations[0].get(), client.data());
  EXPECT_EQ(allocations[2].get(), client.data());
  EXPECT_NE(allocations[3].get(), client.data());
  EXPECT_EQ(slots[0].allocations, 3);
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slots[0], allocations[0].get()),
            0);
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slots[0], client.data()), 1);
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slots[0], allocations[3].get()),
            2);
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slots[0], allocations[1].get()),
            -1);
}

TEST(KernelWorkspaceTest, AnAddressAllocatedTwiceIsItsLastAllocation) {
  int memory[2];
  KernelWorkspace::Slot slot;
  slot.allocations = 3;
  slot.addresses[0] = &memory[0];
  slot.addresses[1] = &memory[1];
  slot.addresses[2] = &memory[0];  // freed and handed out again
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slot, &memory[0]), 2);
  EXPECT_EQ(KernelWorkspace::AllocationOrdinal(slot, &memory[1]), 1);
}

class ResultPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KernelWorkspace::Install();
    devices_ = *Devices::Create(1, 8 << 20);
    session_ = MakeTestSession(1, devices_.get(), nullptr);
    context_.session = session_.get();
    x_ = *session_->Allocate(0, kBytes);
    out_ = *session_->Allocate(0, kBytes);
    for (uint64_t& out : list_outs_) out = *session_->Allocate(0, kBytes);
    float* x = Data(x_);
    for (int64_t i = 0; i < kElements; ++i) x[i] = static_cast<float>(i);
    g_allocate_temporary_first = true;
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
  // Runs temporary_then_result(x) into out; true when the output is x * 2.
  bool Launch(uint64_t sequence) {
    proto::LaunchOp op;
    op.set_name("openreg_placement_test::temporary_then_result");
    Ref(x_, op.add_arguments()->mutable_tensor());
    Ref(out_, op.add_outputs());
    std::fill_n(Data(out_), kElements, 0.0F);
    const absl::Status ran = runner_.Run(context_, op, sequence, nullptr);
    EXPECT_TRUE(ran.ok()) << ran;
    const float* out = Data(out_);
    for (int64_t i = 0; i < kElements; ++i) {
      if (out[i] != 2.0F * static_cast<float>(i)) return false;
    }
    return true;
  }

  // Runs scaled_copies(x) into list_outs_; true when output i is
  // x * (i + 1). `placed` gets how many results the kernel wrote in place.
  bool LaunchList(uint64_t sequence, int* placed) {
    proto::LaunchOp op;
    op.set_name("openreg_placement_test::scaled_copies");
    Ref(x_, op.add_arguments()->mutable_tensor());
    for (uint64_t out : list_outs_) {
      Ref(out, op.add_outputs());
      std::fill_n(Data(out), kElements, 0.0F);
    }
    const absl::Status ran = runner_.Run(context_, op, sequence, nullptr);
    EXPECT_TRUE(ran.ok()) << ran;
    *placed = 0;
    bool right = true;
    for (int i = 0; i < kListResults; ++i) {
      const float* out = Data(list_outs_[i]);
      if (g_last_list_results[i] == out) ++*placed;
      for (int64_t j = 0; j < kElements; ++j) {
        right = right && out[j] == static_cast<float>((i + 1) * j);
      }
    }
    return right;
  }

  c10::InferenceMode inference_mode_;
  std::unique_ptr<Devices> devices_;
  std::unique_ptr<Session> session_;
  StreamContext context_;
  AtenOpRunner runner_;
  uint64_t x_ = 0, out_ = 0;
  std::array<uint64_t, kListResults> list_outs_{};
};

TEST_F(ResultPlacementTest, AResultAllocatedAfterATemporaryIsPlacedNextTime) {
  ASSERT_TRUE(Launch(1));
  // The temporary took the output's memory; the result was copied there.
  EXPECT_NE(g_last_result, Data(out_));
  ASSERT_TRUE(Launch(2));
  EXPECT_EQ(g_last_result, Data(out_));  // written in place: nothing copied
  ASSERT_TRUE(Launch(3));
  EXPECT_EQ(g_last_result, Data(out_));
}

TEST_F(ResultPlacementTest, AKernelThatChangesItsAllocationsStillDelivers) {
  ASSERT_TRUE(Launch(1));
  ASSERT_TRUE(Launch(2));
  // Learned: the second allocation. Now the result is the first, and the
  // second allocation never comes: the result is copied, and learned.
  g_allocate_temporary_first = false;
  ASSERT_TRUE(Launch(3));
  EXPECT_NE(g_last_result, Data(out_));
  ASSERT_TRUE(Launch(4));
  EXPECT_EQ(g_last_result, Data(out_));
  // And back: the temporary takes the memory the result was to get.
  g_allocate_temporary_first = true;
  ASSERT_TRUE(Launch(5));
  ASSERT_TRUE(Launch(6));
  EXPECT_EQ(g_last_result, Data(out_));
}

TEST_F(ResultPlacementTest, EveryResultOfAListIsPlacedFromTheSecondLaunch) {
  int placed = 0;
  ASSERT_TRUE(LaunchList(1, &placed));
  // The first output and those past the learned ones are placed at once;
  // the others of the same size are copied, and learned.
  EXPECT_EQ(placed, 1 + kListResults - ResolvedOp::kLearnedOutputs);
  ASSERT_TRUE(LaunchList(2, &placed));
  EXPECT_EQ(placed, kListResults);  // nothing copied
  ASSERT_TRUE(LaunchList(3, &placed));
  EXPECT_EQ(placed, kListResults);
}

}  // namespace
}  // namespace openreg::daemon
