#include "torch_backend/kernels/decomposed_cpu_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {

int RouteDecomposedCpuOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::PrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
               op.hasKernelForDispatchKey(
                   c10::DispatchKey::CompositeExplicitAutograd) &&
               op.hasKernelForDispatchKey(c10::DispatchKey::Meta);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>();
      });
  return routed;
}

}  // namespace openreg::torch_backend
