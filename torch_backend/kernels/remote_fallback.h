// The boxed fallback that sends an op to the daemon (remote_fallback.cc).
// Explicit kernels call it for the cases they do not handle themselves.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_REMOTE_FALLBACK_H_
#define OPENREG_TORCH_BACKEND_KERNELS_REMOTE_FALLBACK_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg::torch_backend {

// Runs `op` on the openreg device: Meta kernel + asynchronous launch when
// possible, else a synchronous launch. Consumes the op's arguments from
// `stack` and pushes its results, like any boxed kernel.
void RemoteFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The fallback of ops with a sparse COO or quantized argument
// (kernels/sparse_ops.h, kernels/quantized_ops.cc): always a synchronous
// launch (a sparse result's size depends on values; a quantized result's
// quantizer is the kernel's), whose results the daemon allocates.
void RemoteSynchronousFallback(const c10::OperatorHandle& op,
                               torch::jit::Stack* stack);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_REMOTE_FALLBACK_H_
