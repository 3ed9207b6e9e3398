#include "torch_backend/kernels/foreach_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "torch_backend/graphs/capture_registry.h"
#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

// At most this many elements of each list go into one launch, as CUDA's
// multi_tensor_apply splits a list into chunks: a launch is one record of
// its stream's ring, at most half the ring (128 KiB by default), and a
// tensor reference takes 20-60 bytes (more with more dims), so 256
// elements of each of the six lists of a fused Adam step stay below it. A
// list of 3,000 parameters was refused at the call ("a command of 231081
// bytes exceeds the stream ring's limit").
constexpr size_t kElementsPerLaunch = 256;

bool IsForeach(const c10::OperatorHandle& op) {
  return op.operator_name().name.rfind("aten::_foreach_", 0) == 0;
}

// The device of the first openreg tensor among the arguments.
std::optional<c10::DeviceIndex> FirstDevice(
    c10::ArrayRef<c10::IValue> arguments) {
  for (const c10::IValue& value : arguments) {
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

// Whether argument `index` of `op` is a list of tensors or of scalars: the
// lists a foreach op or fused step runs through element by element.
bool IsElementList(const c10::OperatorHandle& op, size_t index) {
  const c10::TypePtr& type = op.schema().arguments()[index].real_type();
  if (type->kind() != c10::TypeKind::ListType) return false;
  const c10::TypeKind element = type->containedType(0)->kind();
  return element == c10::TypeKind::TensorType ||
         element == c10::TypeKind::NumberType;
}

// The length of the op's lists when every one of them has it or is empty
// (a fused step's unused state lists); nullopt otherwise (the kernel's own
// checks then decide, on the whole call).
std::optional<size_t> CommonListLength(const c10::OperatorHandle& op,
                                       c10::ArrayRef<c10::IValue> arguments) {
  std::optional<size_t> length;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!IsElementList(op, i) || !arguments[i].isList()) continue;
    const size_t size = arguments[i].toListRef().size();
    if (size == 0) continue;
    if (length.has_value() && *length != size) return std::nullopt;
    length = size;
  }
  return length;
}

// Elements [begin, end) of every list of a call whose lists have `length`
// elements (or none); the other arguments as they are.
torch::jit::Stack Slice(const c10::OperatorHandle& op,
                        c10::ArrayRef<c10::IValue> arguments, size_t length,
                        size_t begin, size_t end) {
  torch::jit::Stack sliced;
  sliced.reserve(arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    if (!IsElementList(op, i) || !value.isList() ||
        value.toListRef().size() != length) {
      sliced.push_back(value);
      continue;
    }
    const c10::List<c10::IValue> list = value.toList();
    c10::impl::GenericList part(list.elementType());
    part.reserve(end - begin);
    for (size_t j = begin; j < end; ++j) part.push_back(list.get(j));
    sliced.emplace_back(std::move(part));
  }
  return sliced;
}

// Runs `op` in chunks of kElementsPerLaunch list elements: each chunk is
// the same op on a slice of every list, independent of the others (a
// foreach op and a fused optimizer step work element by element). A
// Tensor[] result is the chunks' results in order.
void RunInChunks(const c10::OperatorHandle& op, size_t length,
                 torch::jit::Stack* stack) {
  const size_t argument_count = op.schema().arguments().size();
  const std::vector<c10::IValue> arguments =
      torch::jit::last(*stack, argument_count).vec();
  torch::jit::drop(*stack, argument_count);
  const bool returns_list = op.schema().returns().size() == 1;
  std::vector<at::Tensor> results;
  for (size_t begin = 0; begin < length; begin += kElementsPerLaunch) {
    const size_t end = std::min(length, begin + kElementsPerLaunch);
    torch::jit::Stack chunk = Slice(op, arguments, length, begin, end);
    RemoteFallback(op, &chunk);
    if (!returns_list) continue;
    for (const at::Tensor& tensor : chunk.at(0).toTensorVector()) {
      results.push_back(tensor);
    }
  }
  if (returns_list) stack->emplace_back(std::move(results));
}

void ListOpKernel(const c10::OperatorHandle& op, c10::DispatchKeySet,
                  torch::jit::Stack* stack) {
  const c10::ArrayRef<c10::IValue> arguments =
      torch::jit::last(*stack, op.schema().arguments().size());
  if (IsForeach(op) && AnyCaptureActive()) {
    const std::optional<c10::DeviceIndex> device = FirstDevice(arguments);
    if (device.has_value() && CurrentStreamCaptures(*device)) {
      // Captured per tensor, as before this routing: a replay runs captured
      // per-tensor arithmetic as plain loops (docs/GRAPHS.md), where one
      // foreach launch would replay through ATen's dispatch for each
      // tensor (a replayed MLP step with Adam: 160 -> 215 us). The CPU
      // entry of a routed foreach op is ATen's CompositeExplicitAutograd
      // loop (no CPU kernel of its own: RouteForeachOpsToDaemon), which
      // calls the per-tensor ops on the openreg tensors.
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      return;
    }
  }
  const std::optional<size_t> length = CommonListLength(op, arguments);
  if (length.has_value() && *length > kElementsPerLaunch) {
    RunInChunks(op, *length, stack);
    return;
  }
  RemoteFallback(op, stack);
}

// A fused optimizer step in place (`_fused_adamw_`, ...): lists first, no
// results.
bool IsFusedStep(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  const c10::FunctionSchema& schema = op.schema();
  return name.rfind("aten::_fused_", 0) == 0 && name.back() == '_' &&
         schema.returns().empty() && !schema.arguments().empty() &&
         schema.arguments()[0].type()->kind() == c10::TypeKind::ListType;
}

}  // namespace

int RouteForeachOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::PrivateUse1,
      [](const c10::OperatorHandle& op) {
        const bool foreach = IsForeach(op) &&
                             op.hasKernelForDispatchKey(
                                 c10::DispatchKey::CompositeExplicitAutograd) &&
                             !op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
        return foreach || IsFusedStep(op);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<&ListOpKernel>();
      });
  return routed;
}

}  // namespace openreg::torch_backend
