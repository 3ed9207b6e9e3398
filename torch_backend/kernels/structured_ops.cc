#include "torch_backend/kernels/structured_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {

// cat included: its Python Meta kernel disagreed with CPU's shape logic
// (the legacy skipping of 1-D empty inputs gave [2, 0] where CPU gives
// [0]), but the fallback runs its C++ one (cpp_meta_kernels.h), CPU's own.
int RouteStructuredOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::PrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.hasKernelForDispatchKey(
                   c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
               op.hasKernelForDispatchKey(c10::DispatchKey::Meta);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>();
      });
  return routed;
}

}  // namespace openreg::torch_backend
