// openreg's c10::BackendMeta: per-tensor metadata of this device.
//
// One flag, "openreg.fault_target": the tensor is a target of
// fault-injection campaigns (fault models that target tensors restrict
// themselves to marked ones). It is set and read with PyTorch's generic
// API (torch._utils.set_tensor_metadata / get_tensor_metadata), saved by
// torch.save and restored by torch.load (also weights_only=True) through
// the serialization functions registered for PrivateUse1
// (torch::jit::TensorBackendMetaRegistry), and kept by the copies of a
// tensor: clone(), and copy.deepcopy (which builds its copy with
// new_empty). Results of other ops do not inherit it.
#ifndef OPENREG_TORCH_BACKEND_TENSOR_META_H_
#define OPENREG_TORCH_BACKEND_TENSOR_META_H_

#include <ATen/core/Tensor.h>

namespace openreg::torch_backend {

// The metadata key, as torch._utils.get_tensor_metadata reports it.
inline constexpr char kFaultTargetKey[] = "openreg.fault_target";

bool IsFaultTarget(const at::Tensor& tensor);
void SetFaultTarget(const at::Tensor& tensor, bool target);

// Gives `copy` the metadata of `original` (clone, new_empty).
void CopyTensorMeta(const at::Tensor& original, const at::Tensor& copy);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_TENSOR_META_H_
