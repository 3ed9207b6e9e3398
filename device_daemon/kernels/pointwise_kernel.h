// A launch that is one of ATen's add, sub, mul, div, neg, reciprocal or
// zero_ over float or double tensors of one shape, contiguous and no larger
// than ATen's grain (which ATen runs on one thread), run as a plain loop
// over its device memory instead of through the dispatcher and a
// TensorIterator: on 1,000 floats the loop takes a fifth of ATen's ~1.2 us.
// A kept graph launch (decoded_launch.h) replays so (docs/GRAPHS.md, "What
// a replay costs"), and so does an eager launch (KernelLaunch, unless
// OperandsShareANaN: see the contract).
// Functional, in place or out= (a foreach op's `number * tensor` arrives
// as mul.out with the number first: IEEE + and * commute, so the loop
// takes it second).
// Also pow(number, tensor) of one element (capturable Adam's bias
// corrections, beta ** step: 3 us through ATen, twelve per step of a
// 3-layer MLP), as ATen's scalar lane computes it: std::pow in the type.
//
// Contract:
//  - Bit for bit what ATen computes: the same IEEE operation on the same
//    operands in the same type (ATen's own vector expressions), a Python
//    number cast to the type as ATen casts it, a 0-dim device operand
//    read at every run, the launch's flush-denormal setting applied. One
//    exception ATen has itself: of two NaN operands, ATen's vector lanes
//    return the second and its scalar tail the first (x86's rule), so
//    such a NaN's sign and payload may differ from CPU eager's (an eager
//    launch whose operands have a NaN in the same element runs through
//    ATen, OperandsShareANaN). Ops
//    whose ATen kernels approximate (sqrt, exp, ...) are not matched, nor
//    an alpha other than 1 (ATen's vector lanes fuse it into an FMA), nor
//    a pow of more than one element (its vector lanes approximate).
//  - No wait at the kernel settings gate (kernel_settings_gate.h): the
//    process-wide settings (deterministic mode, default dtype, matmul
//    precision, ...) change nothing these ops compute; flush-denormal,
//    which does, is per thread and applied here.
//  - Match looks at a launch's decoded tensors (`find`: a graph launch
//    that just ran successfully as DecodedLaunch recorded it, or an eager
//    launch's arguments and output before its kernel) and returns a kernel
//    only when every condition above holds and no operand partly overlaps
//    the output (ATen refuses those: it runs them, and raises); anything
//    else runs through ATen as before.
//  - The pointers it keeps are valid while the tensors `find` gave are: for
//    a graph launch, between DecodedLaunch::Acquire and Release.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_KERNEL_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_KERNEL_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "op_codec/kernel_settings.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class PointwiseKernel {
 public:
  // The decoded tensor of one of `op`'s TensorRefs (an argument's, or an
  // output's, which a functional op writes `growable`), or null.
  using TensorFinder =
      absl::FunctionRef<const at::Tensor*(const proto::TensorRef*, bool)>;

  // Whether a launch of `name`.`overload` may match at all.
  static bool MayMatch(absl::string_view name, absl::string_view overload);
  static std::optional<PointwiseKernel> Match(
      const proto::LaunchOp& op, TensorFinder find,
      const op_codec::KernelSettings& settings);  // the launch's

  // Some element is a NaN in both operands (a NaN number counts as one in
  // every element): where ATen's result depends on its lane (see above).
  bool OperandsShareANaN() const;

  // Writes the result; every pointer it uses is pinned by the caller.
  void Run() const;

 private:
  enum class Operation {
    kAdd,
    kSubtract,
    kMultiply,
    kDivide,
    kNegate,
    kReciprocal,
    kZero,
    kPowerOfNumber  // number_ ** self_, one element
  };
  enum class Type { kFloat, kDouble };

  PointwiseKernel() = default;
  static std::optional<PointwiseKernel> MatchPowerOfNumber(
      const proto::LaunchOp& op, TensorFinder find,
      const op_codec::KernelSettings& settings);
  template <typename T>
  void RunAs() const;
  template <typename T>
  bool OperandsShareANaNAs() const;

  Operation operation_ = Operation::kAdd;
  Type type_ = Type::kFloat;
  int64_t count_ = 0;
  void* out_ = nullptr;
  const void* self_ = nullptr;
  const void* other_ = nullptr;   // null: the operand is `number_`
  bool other_broadcast_ = false;  // `other_` is 0-dim
  double number_ = 0;             // exactly representable in the type
  bool flush_denormal_ = false;   // the launch's setting
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_KERNEL_H_
