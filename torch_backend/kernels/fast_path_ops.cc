// Per-op overrides: explicit PrivateUse1 kernels for the hottest small ops
// (relu; add, sub, mul and div of two tensors; a whole-tensor sum) that
// replace the boxed fallback. The fallback is generic: it boxes the
// arguments, builds a key from all of them and looks the output's layout up
// in the Meta cache (or runs the Meta kernel). For these ops on operands
// that share one floating dtype and one plain layout, the output's layout
// and dtype are known without asking, and the kernel checks nothing the
// fast path has not: it allocates the output and encodes the launch
// directly (a third of the fallback's client cost per op). Anything else
// (other layouts, dtypes, mixed operands, a CPU scalar) goes through the
// fallback, which also reports errors the way every other op does.
#include "torch_backend/kernels/fast_path_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <vector>

#include "torch_backend/kernels/blocked_ops.h"
#include "torch_backend/kernels/remote_fallback.h"
#include "torch_backend/kernels/remote_launch.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

std::atomic<uint64_t> g_fast_path_launches{0};

c10::OperatorHandle FindOp(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// One handle per op, found at its first call.
const c10::OperatorHandle& ReluOp() {
  static const c10::OperatorHandle op = FindOp("aten::relu", "");
  return op;
}
const c10::OperatorHandle& ClampMinOp() {
  static const c10::OperatorHandle op = FindOp("aten::clamp_min", "");
  return op;
}
const c10::OperatorHandle& AddOp() {
  static const c10::OperatorHandle op = FindOp("aten::add", "Tensor");
  return op;
}
const c10::OperatorHandle& SubOp() {
  static const c10::OperatorHandle op = FindOp("aten::sub", "Tensor");
  return op;
}
const c10::OperatorHandle& MulOp() {
  static const c10::OperatorHandle op = FindOp("aten::mul", "Tensor");
  return op;
}
const c10::OperatorHandle& DivOp() {
  static const c10::OperatorHandle op = FindOp("aten::div", "Tensor");
  return op;
}
const c10::OperatorHandle& SumDimOp() {
  static const c10::OperatorHandle op = FindOp("aten::sum", "dim_IntList");
  return op;
}

// The dtypes whose elementwise kernels and sum on CPU accept any values
// and keep the dtype (integers promote in div and sum, bool is refused by
// sub and relu, float8 has no kernels).
bool IsPlainFloating(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf ||
         dtype == at::kBFloat16;
}

// A device tensor the fast paths can describe exactly: a plain floating
// dtype, no negative bit (the dispatcher's Negative key resolves it before
// PrivateUse1; should one arrive, the fallback handles it).
bool IsPlainOperand(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_privateuseone() &&
         IsPlainFloating(tensor.scalar_type()) && !tensor.is_neg();
}

// The layout CPU's TensorIterator gives an elementwise op's output when
// every operand is `self`'s size and this layout: contiguous, or
// channels-last contiguous. nullopt for other layouts (transposed,
// strided, or strides of size-1 dimensions that TensorIterator does not
// keep): the fallback asks the Meta kernel. The rule was checked against
// CPU on thousands of random dense layouts with size-1 dimensions
// (test_extending.py checks the cases that differ from the input's
// strides).
std::optional<c10::MemoryFormat> PlainLayout(const at::Tensor& self) {
  if (self.is_contiguous()) return c10::MemoryFormat::Contiguous;
  if (self.dim() == 4 && self.is_contiguous(c10::MemoryFormat::ChannelsLast)) {
    return c10::MemoryFormat::ChannelsLast;
  }
  return std::nullopt;
}

bool SameLayout(const at::Tensor& a, const at::Tensor& b,
                c10::MemoryFormat format) {
  return a.sizes() == b.sizes() && PlainLayout(b) == format;
}

// The fallback, for every call a fast path does not describe.
at::Tensor ViaFallback(const c10::OperatorHandle& op, torch::jit::Stack stack) {
  RemoteFallback(op, &stack);
  return stack.back().toTensor();
}

// Allocates `sizes` in `format` on `like`'s device (current for the
// allocation, as the fallback does) and launches `op(arguments)` into it.
at::Tensor LaunchInto(const c10::OperatorHandle& op,
                      c10::ArrayRef<c10::IValue> arguments,
                      const at::Tensor& like, c10::IntArrayRef sizes,
                      c10::MemoryFormat format) {
  const c10::DeviceIndex device = like.device().index();
  // Most ops run on the current device, where a guard would only read it
  // twice more.
  c10::OptionalDeviceGuard guard;
  if (device != c10::impl::getDeviceGuardImpl(kType)->getDevice().index()) {
    guard.reset_device(like.device());
  }
  at::Tensor output = at::empty(sizes, like.options().memory_format(format));
  LaunchAsync(op, arguments, {output}, device);
  g_fast_path_launches.fetch_add(1, std::memory_order_relaxed);
  return output;
}

at::Tensor ReluFastPath(const at::Tensor& self) {
  const std::optional<c10::MemoryFormat> format =
      IsPlainOperand(self) ? PlainLayout(self) : std::nullopt;
  // The fallback also enforces the block list (blocked_ops.h).
  if (!format || IsOpBlocked(ReluOp().operator_name())) {
    return ViaFallback(ReluOp(), {self});
  }
  // What CPU's relu runs; structured, so the daemon writes into the output
  // through clamp_min.out.
  return LaunchInto(ClampMinOp(), {self, c10::Scalar(0)}, self, self.sizes(),
                    *format);
}

// The binary ops: both operands plain, one dtype, one device, one size and
// layout (no broadcasting, no type promotion).
std::optional<c10::MemoryFormat> BinaryLayout(const c10::OperatorHandle& op,
                                              const at::Tensor& self,
                                              const at::Tensor& other) {
  if (!IsPlainOperand(self) || !IsPlainOperand(other) ||
      self.scalar_type() != other.scalar_type() ||
      self.device() != other.device() || IsOpBlocked(op.operator_name())) {
    return std::nullopt;
  }
  const std::optional<c10::MemoryFormat> format = PlainLayout(self);
  if (!format || !SameLayout(self, other, *format)) return std::nullopt;
  return format;
}

// add and sub take an alpha: for floating tensors CPU refuses only a bool
// or complex one (alpha_check); a symbolic one goes to the fallback.
bool IsPlainAlpha(const c10::Scalar& alpha) {
  return !alpha.isBoolean() && !alpha.isComplex() && !alpha.isSymbolic();
}

template <const c10::OperatorHandle& (*Op)()>
at::Tensor WithAlphaFastPath(const at::Tensor& self, const at::Tensor& other,
                             const c10::Scalar& alpha) {
  const std::optional<c10::MemoryFormat> format =
      IsPlainAlpha(alpha) ? BinaryLayout(Op(), self, other) : std::nullopt;
  if (!format) return ViaFallback(Op(), {self, other, alpha});
  return LaunchInto(Op(), {self, other, alpha}, self, self.sizes(), *format);
}

template <const c10::OperatorHandle& (*Op)()>
at::Tensor BinaryFastPath(const at::Tensor& self, const at::Tensor& other) {
  const std::optional<c10::MemoryFormat> format =
      BinaryLayout(Op(), self, other);
  if (!format) return ViaFallback(Op(), {self, other});
  return LaunchInto(Op(), {self, other}, self, self.sizes(), *format);
}

// sum(self): a 0-dim tensor of self's dtype (for plain floating dtypes),
// whatever self's layout. Both routes launch sum.dim_IntList, the op that
// CPU's composite sum(self) calls and the daemon always ran for it (the
// block list and profiles name it). dim=[] as the composite passes it, not
// None: the CPU kernel builds a dimension mask for None and refuses a
// tensor of more than 64 dimensions, which CPU sums.
at::Tensor SumFastPath(const at::Tensor& self,
                       std::optional<at::ScalarType> dtype) {
  const c10::IValue all_dims(std::vector<int64_t>{});
  if (dtype.has_value() || !IsPlainOperand(self) ||
      IsOpBlocked(SumDimOp().operator_name())) {
    return ViaFallback(SumDimOp(), {self, all_dims, false, dtype});
  }
  return LaunchInto(SumDimOp(), {self, all_dims, false, c10::IValue()}, self,
                    {}, c10::MemoryFormat::Contiguous);
}

}  // namespace

uint64_t FastPathLaunchCount() {
  return g_fast_path_launches.load(std::memory_order_relaxed);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("relu", TORCH_FN(ReluFastPath));
  m.impl("add.Tensor", TORCH_FN(WithAlphaFastPath<AddOp>));
  m.impl("sub.Tensor", TORCH_FN(WithAlphaFastPath<SubOp>));
  m.impl("mul.Tensor", TORCH_FN(BinaryFastPath<MulOp>));
  m.impl("div.Tensor", TORCH_FN(BinaryFastPath<DivOp>));
  m.impl("sum", TORCH_FN(SumFastPath));
}

}  // namespace openreg::torch_backend
