// Per-tensor affine quantized tensors on openreg (quantized_ops.cc).
#ifndef OPENREG_TORCH_BACKEND_KERNELS_QUANTIZED_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_QUANTIZED_OPS_H_

namespace openreg::torch_backend {

// Registers RemoteSynchronousFallback for QuantizedPrivateUse1 on every
// aten op that has a QuantizedCPU kernel and no openreg one, so that the
// daemon runs CPU's quantized kernel (a composite kernel would otherwise
// outrank the fallback). Idempotent; returns the number of ops routed.
int RouteQuantizedOpsToDaemon();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_QUANTIZED_OPS_H_
