// Sends to the daemon whole the few ops that CPU runs as one kernel of its
// own but that ATen gives every other backend as a CompositeExplicitAutograd
// decomposition: `native_layer_norm` and `native_group_norm` (a batch norm
// over a reshaped input, then `addcmul`), `addr`, `any.dims`/`all.dims`.
//
// Run in the client, the decomposition is several launches instead of one,
// slower in the daemon than CPU's fused kernel (layer norm 42 µs against
// 18 µs on the bench's transformer step) and not CPU's bits: openreg's
// kernels are CPU's, so the daemon runs CPU's kernel.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_DECOMPOSED_CPU_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_DECOMPOSED_CPU_OPS_H_

namespace openreg::torch_backend {

// Registers the fallback on PrivateUse1 for every aten op that has a CPU
// kernel, a CompositeExplicitAutograd kernel and a Meta kernel and no
// openreg kernel of its own. Call once, after all static registrations
// (from the Python module's init). Returns the number of ops routed.
int RouteDecomposedCpuOpsToDaemon();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_DECOMPOSED_CPU_OPS_H_
