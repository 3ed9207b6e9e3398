// Which launches run on one intra-op thread (launch_threads.h); that their
// results equal CPU's is tested end to end in
// tests/python/test_launch_threads.py.
#include "device_daemon/kernels/launch_threads.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "device_daemon/kernels/op_table.h"

namespace openreg::daemon {
namespace {

void AddTensor(proto::LaunchOp* op, std::initializer_list<int64_t> sizes) {
  proto::TensorRef* tensor = op->add_arguments()->mutable_tensor();
  for (const int64_t size : sizes) tensor->add_sizes(size);
}

proto::LaunchOp Launch(const std::string& name, const std::string& overload,
                       std::initializer_list<int64_t> sizes) {
  proto::LaunchOp op;
  op.set_name(name);
  op.set_overload(overload);
  AddTensor(&op, sizes);
  return op;
}

int Threads(const proto::LaunchOp& op, int requested) {
  return LaunchIntraOpThreads(op, ResolveOp(op.name(), op.overload()),
                              requested);
}

TEST(LaunchThreadsTest, SmallLaunchesRunOnOneThread) {
  EXPECT_EQ(Threads(Launch("aten::sum", "", {32768}), 4), 1);
  EXPECT_EQ(Threads(Launch("aten::cumsum", "", {128, 256}), 2), 1);
}

TEST(LaunchThreadsTest, LargeReductionsKeepTheClientsCount) {
  EXPECT_EQ(Threads(Launch("aten::sum", "", {32769}), 4), 4);
  EXPECT_EQ(Threads(Launch("aten::cumsum", "", {256, 256}), 2), 2);
}

TEST(LaunchThreadsTest, PointwiseOpsRunOnOneThreadAtAnySize) {
  EXPECT_EQ(Threads(Launch("aten::gelu", "", {1 << 20}), 2), 1);
  EXPECT_EQ(Threads(Launch("aten::add_", "Tensor", {1 << 20}), 2), 1);
}

TEST(LaunchThreadsTest, LibrariesThatSplitByThreadsKeepTheClientsCount) {
  EXPECT_EQ(Threads(Launch("aten::mm", "", {10, 32}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::addmm", "out", {4096, 4096}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::convolution", "", {1, 3, 8, 8}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::_fft_r2c", "", {5, 6, 7}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::_embedding_bag", "", {5, 5}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::linalg_lstsq", "", {3, 3}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::native_layer_norm_backward", "", {2, 7}), 2),
            2);
}

TEST(LaunchThreadsTest, TheLargestTensorOfListsAndOutputsCounts) {
  proto::LaunchOp op = Launch("aten::cat", "", {4});
  proto::OptionalTensorList* list = op.add_arguments()->mutable_tensor_list();
  list->add_values()->mutable_tensor()->add_sizes(10);
  list->add_values()->mutable_tensor()->add_sizes(40000);
  EXPECT_EQ(LargestTensorElements(op), 40000);
  proto::LaunchOp with_output = Launch("aten::cat", "", {4});
  with_output.add_outputs()->add_sizes(50000);
  EXPECT_EQ(LargestTensorElements(with_output), 50000);
}

TEST(LaunchThreadsTest, OverflowingAndSparseSizesCountAsUnbounded) {
  constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(LargestTensorElements(
                Launch("aten::sum", "", {int64_t{1} << 40, int64_t{1} << 40})),
            kUnbounded);
  proto::LaunchOp sparse = Launch("aten::add", "Tensor", {4});
  sparse.add_arguments()->mutable_sparse_coo();
  EXPECT_EQ(LargestTensorElements(sparse), kUnbounded);
  EXPECT_EQ(Threads(Launch("aten::sum", "", {0, 1 << 30}), 2), 1);
}

TEST(LaunchThreadsTest, OneRequestedThreadAndUnknownOpsStayAsAsked) {
  EXPECT_EQ(Threads(Launch("aten::sum", "", {1 << 20}), 1), 1);
  EXPECT_EQ(Threads(Launch("custom::op", "", {4}), 2), 2);
  EXPECT_EQ(Threads(Launch("aten::no_such_op", "", {4}), 2), 2);
}

}  // namespace
}  // namespace openreg::daemon
