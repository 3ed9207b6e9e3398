// Registers one boxed kernel, for one dispatch key, on a selection of aten
// ops: how openreg routes whole op families to the daemon where a
// composite kernel would otherwise run in the client (structured ops,
// sparse and quantized kernels). A registration for a dispatch key beats
// the composite kernels; a backend fallback does not.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_OP_ROUTING_H_
#define OPENREG_TORCH_BACKEND_KERNELS_OP_ROUTING_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <functional>

namespace openreg::torch_backend {

// Registers the kernel `make_kernel` makes (e.g.
// torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>) for `key` on
// every aten op for which `selects` is true and that has no kernel for
// `key` yet. The registrations last until exit. Returns their number.
int RouteAtenOps(c10::DispatchKey key,
                 const std::function<bool(const c10::OperatorHandle&)>& selects,
                 const std::function<torch::CppFunction()>& make_kernel);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_OP_ROUTING_H_
