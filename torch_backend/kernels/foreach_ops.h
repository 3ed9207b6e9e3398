// Sends ATen's foreach ops (`_foreach_add_`, `_foreach_sqrt`, ...) to the
// daemon whole: one launch for the whole tensor list.
//
// openreg is a foreach device (torch.utils._foreach_utils lists the
// PrivateUse1 backend), so optimizers and clip_grad_norm_ take their
// multi-tensor path on it, as on CUDA. ATen gives every backend but CUDA
// a CompositeExplicitAutograd kernel that loops over the list in the
// caller: run in the client, AdamW's step on a 29-parameter model was 236
// launches, each paying the client's dispatch and the daemon's per-command
// cost. Routed, it is 8, and the daemon runs the same per-tensor loop (CPU
// eager's kernel, so CPU's bits). Under graph capture they stay per-tensor
// launches, which a replay runs as plain loops (docs/GRAPHS.md).
//
// A list longer than 256 elements goes in chunks of 256, one launch each
// (a launch must fit its stream's ring), as CUDA's multi_tensor_apply
// splits a list; so do the lists of CPU's fused optimizer steps
// (`_fused_adamw_`, ...), which are otherwise the fallback's.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_FOREACH_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_FOREACH_OPS_H_

namespace openreg::torch_backend {

// Registers that kernel on PrivateUse1 for every `aten::_foreach_*` op
// whose other backends get ATen's CompositeExplicitAutograd loop (no CPU
// kernel of its own) and for the in-place fused optimizer steps, unless
// openreg has a kernel of its own for them. Call once, after all static
// registrations (from the Python module's init). Returns the number of ops
// routed.
int RouteForeachOpsToDaemon();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_FOREACH_OPS_H_
