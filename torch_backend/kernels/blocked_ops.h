// The block list: ops that the boxed fallback refuses with "not implemented
// for openreg" instead of sending them to the daemon (e.g. an op whose CPU
// kernel gives results an integrator does not want to support). Filled from
// $OPENREG_BLOCKED_OPS (comma-separated) and torch_openreg.block_op().
#ifndef OPENREG_TORCH_BACKEND_KERNELS_BLOCKED_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_BLOCKED_OPS_H_

#include <ATen/core/operator_name.h>

#include <string>
#include <vector>

namespace openreg::torch_backend {

// Whether `op` is blocked, either by its name ("aten::add", every overload)
// or by its full name ("aten::add.Tensor", that overload only).
bool IsOpBlocked(const c10::OperatorName& op);

// `name` is "namespace::op" or "namespace::op.overload"; anything else is a
// ValueError. Blocking an op that does not exist is allowed (a library that
// defines it may be loaded later).
void BlockOp(const std::string& name);
// Returns whether `name` was blocked.
bool UnblockOp(const std::string& name);
// The blocked names, sorted.
std::vector<std::string> BlockedOps();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_BLOCKED_OPS_H_
