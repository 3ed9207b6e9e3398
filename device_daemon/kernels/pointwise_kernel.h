// A kept graph launch (decoded_launch.h) that is one of ATen's add, sub,
// mul, div, neg, reciprocal or zero_ over float or double tensors of one
// shape, contiguous and no larger than ATen's grain (which ATen runs on one
// thread), replayed as a plain loop over its device memory instead of
// through the dispatcher and a TensorIterator (docs/GRAPHS.md, "What a
// replay costs"): on 1,000 floats the loop takes a fifth of ATen's ~1.2 us.
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
//    such a NaN's sign and payload may differ from CPU eager's. Ops
//    whose ATen kernels approximate (sqrt, exp, ...) are not matched, nor
//    an alpha other than 1 (ATen's vector lanes fuse it into an FMA), nor
//    a pow of more than one element (its vector lanes approximate).
//  - No wait at the kernel settings gate (kernel_settings_gate.h): the
//    process-wide settings (deterministic mode, default dtype, matmul
//    precision, ...) change nothing these ops compute; flush-denormal,
//    which does, is per thread and applied here.
//  - Match looks at a launch that just ran successfully as `decoded`
//    recorded it, and returns a kernel only when every condition above
//    holds; anything else replays through ATen as before.
//  - The pointers it keeps are valid while `decoded` is (its contract), so
//    Run only between DecodedLaunch::Acquire and Release.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_KERNEL_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_KERNEL_H_

#include <cstdint>
#include <optional>

#include "op_codec/kernel_settings.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class DecodedLaunch;

class PointwiseKernel {
 public:
  static std::optional<PointwiseKernel> Match(
      const proto::LaunchOp& op, const DecodedLaunch& decoded,
      const op_codec::KernelSettings& settings);  // the launch's

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
      const proto::LaunchOp& op, const DecodedLaunch& decoded,
      const op_codec::KernelSettings& settings);
  template <typename T>
  void RunAs() const;

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
