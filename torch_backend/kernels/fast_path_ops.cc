// A per-op override: an explicit PrivateUse1 kernel for `aten::relu` that
// replaces the boxed fallback. The fallback is generic: it runs the op's
// Meta kernel (or looks its result up by argument metadata) to learn the
// output's layout. For relu on a dense tensor the layout is known without
// asking (the input's sizes and strides, as CPU's TensorIterator produces
// them), so the kernel allocates the output and encodes the launch directly.
// Anything else (non-dense layouts, dtypes relu rejects) goes through the
// fallback, which also reports errors the way every other op does.
#include "torch_backend/kernels/fast_path_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <atomic>
#include <vector>

#include "torch_backend/kernels/blocked_ops.h"
#include "torch_backend/kernels/remote_fallback.h"
#include "torch_backend/kernels/remote_launch.h"

namespace openreg::torch_backend {
namespace {

std::atomic<uint64_t> g_fast_path_launches{0};

const c10::OperatorHandle& ReluOp() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::relu", "");
  return op;
}

const c10::OperatorHandle& ClampMinOp() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::clamp_min", "");
  return op;
}

bool FastPathApplies(const at::Tensor& self) {
  const at::ScalarType dtype = self.scalar_type();
  // CPU's relu rejects bool and complex: the fallback's Meta call reports
  // that at the call site, as on CUDA.
  return self.is_non_overlapping_and_dense() && dtype != at::kBool &&
         !at::isComplexType(dtype) && !self.is_neg();
}

at::Tensor ReluFastPath(const at::Tensor& self) {
  // The fallback also enforces the block list (blocked_ops.h).
  if (!FastPathApplies(self) || IsOpBlocked(ReluOp().operator_name())) {
    torch::jit::Stack stack{self};
    RemoteFallback(ReluOp(), &stack);
    return stack.back().toTensor();
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor output =
      at::empty_strided(self.sizes(), self.strides(), self.options());
  const std::vector<c10::IValue> arguments{self, c10::Scalar(0)};
  LaunchAsync(ClampMinOp(), arguments, {output}, self.device().index());
  g_fast_path_launches.fetch_add(1, std::memory_order_relaxed);
  return output;
}

}  // namespace

uint64_t FastPathLaunchCount() {
  return g_fast_path_launches.load(std::memory_order_relaxed);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("relu", TORCH_FN(ReluFastPath));
}

}  // namespace openreg::torch_backend
