// Sends the functional and in-place variants of ATen's structured ops to
// the daemon whole.
//
// ATen implements them for every backend with one
// CompositeExplicitAutogradNonFunctional kernel that runs the op's shape
// logic (a TensorIterator build) on the host, allocates the output and
// calls the out= variant. For openreg that is host work the Meta-result
// cache already answers, followed by a second trip through the fallback.
// Registering the fallback for these ops on PrivateUse1 makes `add` one
// launch, and the daemon runs it straight into the output (op_table.h).
#ifndef OPENREG_TORCH_BACKEND_KERNELS_STRUCTURED_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_STRUCTURED_OPS_H_

namespace openreg::torch_backend {

// Registers the fallback on PrivateUse1 for every aten op that has a
// CompositeExplicitAutogradNonFunctional kernel and a Meta kernel and no
// openreg kernel of its own. Call once, after all static registrations
// (from the Python module's init). Returns the number of ops routed.
int RouteStructuredOpsToDaemon();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_STRUCTURED_OPS_H_
