#include "torch_backend/kernels/foreach_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>

#include "torch_backend/graphs/capture_registry.h"
#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

// The device of the first openreg tensor among the arguments.
std::optional<c10::DeviceIndex> FirstDevice(const torch::jit::Stack& stack,
                                            size_t arguments) {
  for (size_t i = stack.size() - arguments; i < stack.size(); ++i) {
    const c10::IValue& value = stack[i];
    if (value.isTensor() && value.toTensor().is_privateuseone()) {
      return value.toTensor().device().index();
    }
    if (!value.isTensorList()) continue;
    for (const c10::IValue& element : value.toListRef()) {
      const at::Tensor& tensor = element.toTensor();
      if (tensor.is_privateuseone()) return tensor.device().index();
    }
  }
  return std::nullopt;
}

void ForeachKernel(const c10::OperatorHandle& op, c10::DispatchKeySet,
                   torch::jit::Stack* stack) {
  const std::optional<c10::DeviceIndex> device =
      AnyCaptureActive() ? FirstDevice(*stack, op.schema().arguments().size())
                         : std::nullopt;
  if (device.has_value() && CurrentStreamCaptures(*device)) {
    // Captured per tensor, as before this routing: a replay runs captured
    // per-tensor arithmetic as plain loops (docs/GRAPHS.md), where one
    // foreach launch would replay through ATen's dispatch for each tensor
    // (a replayed MLP step with Adam: 160 -> 215 us). The CPU entry of
    // these ops is ATen's CompositeExplicitAutograd loop (RouteForeach...
    // selects ops without a CPU kernel of their own), which calls the
    // per-tensor ops on the openreg tensors.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  RemoteFallback(op, stack);
}

}  // namespace

int RouteForeachOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::PrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.operator_name().name.rfind("aten::_foreach_", 0) == 0 &&
               op.hasKernelForDispatchKey(
                   c10::DispatchKey::CompositeExplicitAutograd) &&
               !op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<&ForeachKernel>();
      });
  return routed;
}

}  // namespace openreg::torch_backend
