#include "torch_backend/tensor_meta.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/new_empty_native.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

struct OpenRegTensorMeta final : c10::BackendMeta {
  explicit OpenRegTensorMeta(bool fault_target) : fault_target(fault_target) {}

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    return c10::make_intrusive<OpenRegTensorMeta>(fault_target);
  }

  bool fault_target;
};

const OpenRegTensorMeta* MetaOf(const at::Tensor& tensor) {
  return dynamic_cast<const OpenRegTensorMeta*>(
      tensor.unsafeGetTensorImpl()->get_backend_meta());
}

// torch.save and get_tensor_metadata: only flags that are set.
void GetForSerialization(const at::Tensor& tensor,
                         std::unordered_map<std::string, bool>& metadata) {
  if (IsFaultTarget(tensor)) metadata[kFaultTargetKey] = true;
}

// torch.load and set_tensor_metadata: `metadata` holds what the generic
// keys (conj, neg) left.
void SetFromSerialization(const at::Tensor& tensor,
                          std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [key, value] : metadata) {
    TORCH_CHECK_VALUE(key == kFaultTargetKey,
                      "openreg: unknown tensor "
                      "metadata key '",
                      key, "' (openreg knows '", kFaultTargetKey, "')");
    SetFaultTarget(tensor, value);
  }
}

const bool kRegistered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1,
                                        &GetForSerialization,
                                        &SetFromSerialization);
  return true;
}();

// clone runs in the daemon as before, then hands the metadata on.
void CloneKeepingMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor original =
      (*stack)[stack->size() - op.schema().arguments().size()].toTensor();
  RemoteFallback(op, stack);
  CopyTensorMeta(original, stack->back().toTensor());
}

// ATen's own new_empty (an empty tensor with self's options), then the
// metadata: copy.deepcopy builds its copy with it.
at::Tensor NewEmptyKeepingMeta(const at::Tensor& self, c10::SymIntArrayRef size,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout,
                               std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  at::Tensor result = at::native::new_empty_symint(self, size, dtype, layout,
                                                   device, pin_memory);
  CopyTensorMeta(self, result);
  return result;
}

}  // namespace

bool IsFaultTarget(const at::Tensor& tensor) {
  const OpenRegTensorMeta* meta = MetaOf(tensor);
  return meta != nullptr && meta->fault_target;
}

void SetFaultTarget(const at::Tensor& tensor, bool target) {
  tensor.unsafeGetTensorImpl()->set_backend_meta(
      c10::make_intrusive<OpenRegTensorMeta>(target));
}

void CopyTensorMeta(const at::Tensor& original, const at::Tensor& copy) {
  if (const OpenRegTensorMeta* meta = MetaOf(original);
      meta != nullptr && copy.is_privateuseone()) {
    SetFaultTarget(copy, meta->fault_target);
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clone",
         torch::CppFunction::makeFromBoxedFunction<&CloneKeepingMeta>());
  m.impl("new_empty", TORCH_FN(NewEmptyKeepingMeta));
}

}  // namespace openreg::torch_backend
