#include "torch_backend/kernels/structured_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

// Ops whose Meta kernel (torch/_meta_registrations.py) disagrees with the
// C++ shape logic: they keep ATen's host-side shape computation. cat: the
// legacy skipping of 1-D empty inputs gives [0] on CPU but [2, 0] in Meta.
bool KeepsHostShapeLogic(const c10::OperatorName& name) {
  return name.name == "aten::cat";
}

}  // namespace

int RouteStructuredOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::PrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.hasKernelForDispatchKey(
                   c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
               op.hasKernelForDispatchKey(c10::DispatchKey::Meta) &&
               !KeepsHostShapeLogic(op.operator_name());
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>();
      });
  return routed;
}

}  // namespace openreg::torch_backend
