// A busy client's launches run with one thread fewer where a probe found
// the same bits (core_sharing.h, thread_count_probe.h), and layer norm's
// backward computes N threads' bits on N - 1
// (layer_norm_backward_in_chunks.h). End to end, with a client:
// tests/python/test_launch_threads.py.
#include "device_daemon/kernels/core_sharing.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "device_daemon/kernels/layer_norm_backward_in_chunks.h"
#include "device_daemon/kernels/thread_count_probe.h"
#include "op_codec/kernel_settings.h"

namespace {

// Test ops: a result that is the thread count, one that is not, a kernel
// that throws, and an in-place one.
at::Tensor CountThreads(const at::Tensor& x) {
  return at::full_like(x, at::get_num_threads());
}
at::Tensor Twice(const at::Tensor& x) { return x * 2; }
at::Tensor Refuse(const at::Tensor& /*x*/) {
  TORCH_CHECK(false, "refused");
  return {};
}
at::Tensor& ScaleByThreads(at::Tensor& x) {
  return x.mul_(at::get_num_threads());
}

TORCH_LIBRARY(openreg_core_sharing_test, m) {
  m.def("count_threads(Tensor x) -> Tensor");
  m.def("twice(Tensor x) -> Tensor");
  m.def("refuse(Tensor x) -> Tensor");
  m.def("scale_by_threads_(Tensor(a!) x) -> Tensor(a!)");
}
TORCH_LIBRARY_IMPL(openreg_core_sharing_test, CPU, m) {
  m.impl("count_threads", CountThreads);
  m.impl("twice", Twice);
  m.impl("refuse", Refuse);
  m.impl("scale_by_threads_", ScaleByThreads);
}

}  // namespace

namespace openreg::daemon {
namespace {

c10::OperatorHandle Op(const std::string& name,
                       const std::string& overload = "") {
  std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(handle.has_value()) << name;
  return *handle;
}

void CallBoxed(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  handle.callBoxed(stack);
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  const at::Tensor dense_a = a.contiguous();
  const at::Tensor dense_b = b.contiguous();
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         std::memcmp(dense_a.const_data_ptr(), dense_b.const_data_ptr(),
                     dense_a.nbytes()) == 0;
}

class ThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override { op_codec::SetThreadIntraOpThreads(2); }
};

using ThreadCountProbeTest = ThreadsTest;

TEST_F(ThreadCountProbeTest, AResultThatDependsOnTheCountDiffers) {
  const torch::jit::Stack stack = {at::ones({8})};
  EXPECT_FALSE(SameBitsWithFewerThreads(
      Op("openreg_core_sharing_test::count_threads"), stack, CallBoxed, 1, 2));
  EXPECT_EQ(at::get_num_threads(), 2);  // restored
}

TEST_F(ThreadCountProbeTest, AResultThatDoesNotDependOnTheCountIsTheSame) {
  const torch::jit::Stack stack = {at::ones({8})};
  EXPECT_TRUE(SameBitsWithFewerThreads(Op("openreg_core_sharing_test::twice"),
                                       stack, CallBoxed, 1, 2));
}

TEST_F(ThreadCountProbeTest, AKernelThatThrowsCountsAsDiffering) {
  const torch::jit::Stack stack = {at::ones({8})};
  EXPECT_FALSE(SameBitsWithFewerThreads(Op("openreg_core_sharing_test::refuse"),
                                        stack, CallBoxed, 1, 2));
}

TEST_F(ThreadCountProbeTest, AWrittenArgumentCountsAsAResult) {
  const torch::jit::Stack stack = {at::ones({8})};
  EXPECT_FALSE(SameBitsWithFewerThreads(
      Op("openreg_core_sharing_test::scale_by_threads_"), stack, CallBoxed, 1,
      2));
}

TEST_F(ThreadCountProbeTest, TheProbeNeverWritesTheLaunchsOwnTensors) {
  const at::Tensor x = at::arange(8, at::kFloat);
  const at::Tensor before = x.clone();
  const torch::jit::Stack stack = {x};
  SameBitsWithFewerThreads(Op("openreg_core_sharing_test::scale_by_threads_"),
                           stack, CallBoxed, 1, 2);
  EXPECT_TRUE(SameBytes(x, before));
}

TEST_F(ThreadCountProbeTest, RandomOpsAndGeneratorsAreNotProbed) {
  const at::Tensor x = at::full({8}, 0.5);
  EXPECT_FALSE(
      ThreadProbeSignature(Op("aten::bernoulli"), {x, c10::IValue()}, 2)
          .has_value());
  EXPECT_FALSE(ThreadProbeSignature(Op("openreg_core_sharing_test::twice"),
                                    {x, at::detail::getDefaultCPUGenerator()},
                                    2)
                   .has_value());
}

TEST_F(ThreadCountProbeTest, SignaturesTellShapesStridesDtypesAndScalarsApart) {
  const c10::OperatorHandle add = Op("aten::add", "Tensor");
  auto key = [&add](const at::Tensor& x, double alpha, int threads = 2) {
    return ThreadProbeSignature(add, {x, x, alpha}, threads).value();
  };
  const at::Tensor x = at::randn({4, 6});
  EXPECT_EQ(key(x, 1.0), key(at::randn({4, 6}), 1.0));  // values do not
  EXPECT_NE(key(x, 1.0), key(at::randn({6, 4}), 1.0));
  EXPECT_NE(key(x, 1.0), key(at::randn({6, 4}).t(), 1.0));
  EXPECT_NE(key(x, 1.0), key(x.to(at::kDouble), 1.0));
  EXPECT_NE(key(x, 1.0), key(x, 1.0000001));
  EXPECT_NE(key(x, 1.0), key(x, 1.0, /*threads=*/3));
}

TEST_F(ThreadCountProbeTest, LaunchesBeyondTheByteLimitAreNotProbed) {
  const at::Tensor small = at::empty({16});
  const at::Tensor large = at::empty({kThreadProbeMaxBytes / 4 + 1});
  const c10::OperatorHandle doubling = Op("aten::mul", "Scalar");
  EXPECT_TRUE(ThreadProbeSignature(doubling, {small, 2.0}, 2).has_value());
  EXPECT_FALSE(ThreadProbeSignature(doubling, {large, 2.0}, 2).has_value());
}

using LayerNormBackwardInChunksTest = ThreadsTest;

// native_layer_norm_backward's arguments for `shape`, normalized over its
// last `normalized` dims.
torch::jit::Stack LayerNormBackwardArguments(at::IntArrayRef shape,
                                             int normalized,
                                             at::ScalarType dtype, bool affine,
                                             std::vector<bool> mask) {
  const at::Tensor input = at::randn(shape, at::TensorOptions(dtype));
  const std::vector<int64_t> normalized_shape(shape.end() - normalized,
                                              shape.end());
  const at::Tensor weight =
      affine ? at::randn(normalized_shape, input.options()) : at::Tensor();
  const at::Tensor bias =
      affine ? at::randn(normalized_shape, input.options()) : at::Tensor();
  auto [output, mean, rstd] =
      at::native_layer_norm(input, normalized_shape, weight, bias, 1e-5);
  return {at::randn(shape, input.options()),
          input,
          normalized_shape,
          mean,
          rstd,
          weight,
          bias,
          c10::List<bool>({mask[0], mask[1], mask[2]})};
}

TEST_F(LayerNormBackwardInChunksTest, GivesTheKernelsBitsOnOneThreadFewer) {
  const c10::OperatorHandle backward = Op("aten::native_layer_norm_backward");
  struct Case {
    std::vector<int64_t> shape;
    int normalized;
    at::ScalarType dtype;
    bool affine;
    std::vector<bool> mask;
  };
  const std::vector<Case> cases = {
      {{8, 32, 64}, 1, at::kFloat, true, {true, true, true}},
      {{7, 5}, 1, at::kFloat, true, {true, true, true}},   // odd rows
      {{1, 10}, 1, at::kFloat, true, {true, true, true}},  // one chunk
      {{2, 10}, 1, at::kFloat, true, {true, true, true}},  // rows < N
      {{3, 4, 6}, 2, at::kFloat, true, {true, true, true}},
      {{9, 33}, 1, at::kDouble, true, {true, true, true}},
      {{6, 16}, 1, at::kFloat, false, {true, false, false}},
      {{6, 16}, 1, at::kFloat, true, {false, true, true}},
  };
  // N = 2 runs the chunks one after the other on one thread, N = 3 and 4
  // side by side on N - 1 (more threads than this host's cores is fine:
  // the bits depend on the count, not on the cores).
  for (const int threads : {2, 3, 4}) {
    for (const Case& test : cases) {
      const torch::jit::Stack arguments = LayerNormBackwardArguments(
          test.shape, test.normalized, test.dtype, test.affine, test.mask);
      torch::jit::Stack on_n = arguments;
      op_codec::SetThreadIntraOpThreads(threads);
      backward.callBoxed(&on_n);
      torch::jit::Stack on_fewer = arguments;
      op_codec::SetThreadIntraOpThreads(threads - 1);
      RunLayerNormBackwardInChunks(backward, &on_fewer, threads);
      op_codec::SetThreadIntraOpThreads(2);
      ASSERT_EQ(on_fewer.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(SameBytes(on_fewer[i].toTensor(), on_n[i].toTensor()))
            << "result " << i << " of shape " << at::IntArrayRef(test.shape)
            << " for " << threads << " threads";
      }
    }
  }
}

TEST_F(LayerNormBackwardInChunksTest, AChunksKernelErrorReachesTheCaller) {
  const c10::OperatorHandle backward = Op("aten::native_layer_norm_backward");
  torch::jit::Stack arguments = LayerNormBackwardArguments(
      {8, 16}, 1, at::kFloat, true, {true, true, true});
  arguments[5] = at::randn({15});  // a weight of the wrong length
  op_codec::SetThreadIntraOpThreads(2);
  EXPECT_THROW(RunLayerNormBackwardInChunks(backward, &arguments, 3),
               c10::Error);
}

TEST_F(LayerNormBackwardInChunksTest, DiffersFromTheKernelOnOneThreadFewer) {
  // The premise: the kernel's own bits depend on the count, so the plain
  // kernel on N - 1 threads could not stand in for it.
  const c10::OperatorHandle backward = Op("aten::native_layer_norm_backward");
  const torch::jit::Stack arguments = LayerNormBackwardArguments(
      {64, 64}, 1, at::kFloat, true, {true, true, true});
  for (const int threads : {2, 3}) {
    op_codec::SetThreadIntraOpThreads(threads);
    torch::jit::Stack on_n = arguments;
    backward.callBoxed(&on_n);
    EXPECT_FALSE(SameBitsWithFewerThreads(backward, arguments, CallBoxed,
                                          threads - 1, threads))
        << threads << " threads";
    torch::jit::Stack on_fewer = arguments;
    op_codec::SetThreadIntraOpThreads(threads - 1);
    backward.callBoxed(&on_fewer);
    EXPECT_FALSE(SameBytes(on_fewer[1].toTensor(), on_n[1].toTensor()))
        << threads << " threads";
  }
  op_codec::SetThreadIntraOpThreads(2);
}

using CoreSharingTest = ThreadsTest;

// Runs x * 2 (aten::mul.Scalar) through `sharing`; returns its threads.
int RunDoubling(CoreSharing& sharing, bool busy) {
  torch::jit::Stack stack = {at::ones({8}), 2.0};
  const int threads = sharing.Run(Op("aten::mul", "Scalar"), &stack, 2, busy);
  EXPECT_TRUE(SameBytes(stack.at(0).toTensor(), at::full({8}, 2.0)));
  EXPECT_EQ(at::get_num_threads(), 2);  // restored
  return threads;
}

TEST_F(CoreSharingTest, ABusyClientsLaunchRunsOnOneFewerFromItsSecondOn) {
  CoreSharing sharing(/*enabled=*/true);
  EXPECT_EQ(RunDoubling(sharing, /*busy=*/true), 2);  // seen
  EXPECT_EQ(RunDoubling(sharing, /*busy=*/true), 1);  // probed
  EXPECT_EQ(RunDoubling(sharing, /*busy=*/true), 1);
}

TEST_F(CoreSharingTest, ASleepingClientsLaunchesGetEveryThread) {
  CoreSharing sharing(/*enabled=*/true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunDoubling(sharing, /*busy=*/true), i == 0 ? 2 : 1);
  }
  EXPECT_EQ(RunDoubling(sharing, /*busy=*/false), 2);
}

TEST_F(CoreSharingTest, OffEveryLaunchKeepsItsCount) {
  CoreSharing sharing(/*enabled=*/false);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(RunDoubling(sharing, /*busy=*/true), 2);
  }
}

// Layer norm's backward as core sharing runs it with one thread fewer.
void InChunksOfThree(const c10::OperatorHandle& handle,
                     torch::jit::Stack* stack) {
  RunLayerNormBackwardInChunks(handle, stack, 3);
}

TEST_F(CoreSharingTest, ALaunchWhoseBitsTheFewerThreadsMissKeepsItsCount) {
  // In bfloat16 the kernel adds its three chunks' buffers in float and
  // rounds once; the chunked form rounds each chunk's sums and then each
  // addition (the premise, checked first on the probe's own draws).
  op_codec::SetThreadIntraOpThreads(3);
  const c10::OperatorHandle backward = Op("aten::native_layer_norm_backward");
  const torch::jit::Stack arguments = LayerNormBackwardArguments(
      {64, 64}, 1, at::kBFloat16, true, {true, true, true});
  torch::jit::Stack expected = arguments;
  backward.callBoxed(&expected);
  EXPECT_FALSE(
      SameBitsWithFewerThreads(backward, arguments, InChunksOfThree, 2, 3));
  CoreSharing sharing(/*enabled=*/true);
  for (int launch = 0; launch < 4; ++launch) {
    torch::jit::Stack stack = arguments;
    EXPECT_EQ(sharing.Run(backward, &stack, 3, /*client_busy=*/true), 3);
    EXPECT_TRUE(SameBytes(stack[1].toTensor(), expected[1].toTensor()));
  }
}

TEST_F(CoreSharingTest, OpsOutsideAtenKeepTheirCount) {
  // A --kernel_library op may do more than write its tensors: never run
  // twice more by a probe.
  CoreSharing sharing(/*enabled=*/true);
  for (int launch = 0; launch < 4; ++launch) {
    torch::jit::Stack stack = {at::ones({8})};
    EXPECT_EQ(sharing.Run(Op("openreg_core_sharing_test::twice"), &stack, 2,
                          /*client_busy=*/true),
              2);
  }
}

TEST_F(CoreSharingTest, LayerNormBackwardRunsInChunksOnOneThreadFewer) {
  CoreSharing sharing(/*enabled=*/true);
  const c10::OperatorHandle backward = Op("aten::native_layer_norm_backward");
  const torch::jit::Stack arguments = LayerNormBackwardArguments(
      {16, 64}, 1, at::kFloat, true, {true, true, true});
  for (const int threads : {2, 3}) {
    op_codec::SetThreadIntraOpThreads(threads);
    torch::jit::Stack expected = arguments;
    backward.callBoxed(&expected);
    for (int launch = 0; launch < 3; ++launch) {
      torch::jit::Stack stack = arguments;
      EXPECT_EQ(sharing.Run(backward, &stack, threads, /*client_busy=*/true),
                launch == 0 ? threads : threads - 1);
      EXPECT_EQ(at::get_num_threads(), threads);  // restored
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_TRUE(SameBytes(stack[i].toTensor(), expected[i].toTensor()))
            << "result " << i << " for " << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace openreg::daemon
