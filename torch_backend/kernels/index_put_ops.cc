// index_put_ where CUDA's kernel and CPU's raise different errors.
//
// ATen sends CUDA's index_put_ with accumulate=True, or under
// torch.use_deterministic_algorithms(True) with more than one value, to a
// sort-based kernel (_index_put_impl_ in TensorAdvancedIndexing.cpp, keyed
// on the CUDA and XPU device types, so never PrivateUse1's). There, values
// that cannot be broadcast to the indexed shape fail in `expand`: "The
// expanded size of the tensor (3) must match the existing size (6) ...",
// the message PyTorch's device-generic test_index_put_deterministic_with_
// optional_tensors expects of an accelerator; CPU's kernel, which the
// daemon runs, says "shape mismatch: value tensor of shape ... cannot be
// broadcast ...". Both refuse the same calls: only the words differ, so
// only a refused call is rewritten, with the words of the `expand` CUDA's
// kernel makes. The indexed shape comes from a Meta index (boolean masks
// first become their nonzero() indices, as on CUDA).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <optional>
#include <string_view>
#include <vector>

#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

constexpr std::string_view kCpuShapeMismatch = "shape mismatch: value tensor";

bool TakesCudasSortPath(const at::Tensor& values, bool accumulate) {
  return accumulate ||
         (at::globalContext().deterministicAlgorithms() && values.numel() > 1);
}

// The shape `self[indices]` has, if a Meta index can tell.
std::optional<std::vector<int64_t>> IndexedShape(
    const at::Tensor& self,
    const c10::List<std::optional<at::Tensor>>& indices) try {
  const auto meta = [](const at::Tensor& tensor) {
    return at::empty_strided(tensor.sizes(), tensor.strides(),
                             tensor.options().device(at::kMeta));
  };
  c10::List<std::optional<at::Tensor>> meta_indices;
  for (const std::optional<at::Tensor> index : indices) {
    if (!index.has_value() || !index->defined()) {
      meta_indices.push_back(std::nullopt);
    } else if (index->scalar_type() == at::kBool ||
               index->scalar_type() == at::kByte) {
      const at::Tensor positions = index->nonzero();
      for (int64_t dim = 0; dim < positions.size(1); ++dim) {
        meta_indices.push_back(meta(positions.select(1, dim)));
      }
    } else {
      meta_indices.push_back(meta(*index));
    }
  }
  return at::index(meta(self), meta_indices).sizes().vec();
} catch (const c10::Error&) {
  return std::nullopt;
}

void IndexPutImpl(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // _index_put_impl_(self, indices, values, accumulate, unsafe)
  const auto arguments = torch::jit::last(*stack, 5);
  const at::Tensor self = arguments[0].toTensor();
  // A list of optional tensors; TorchScript passes it as a generic list.
  c10::List<std::optional<at::Tensor>> indices;
  for (const c10::IValue& index : arguments[1].toListRef()) {
    indices.push_back(index.isNone() ? std::nullopt
                                     : std::optional(index.toTensor()));
  }
  const at::Tensor values = arguments[2].toTensor();
  const bool accumulate = arguments[3].toBool();
  try {
    RemoteFallback(op, stack);
  } catch (const c10::Error& error) {
    if (!TakesCudasSortPath(values, accumulate) ||
        std::string_view(error.msg()).rfind(kCpuShapeMismatch, 0) != 0) {
      throw;
    }
    const std::optional<std::vector<int64_t>> shape =
        IndexedShape(self, indices);
    if (shape.has_value()) {
      // CUDA's kernel expands the values to the indexed shape: its error.
      at::empty_strided(values.sizes(), values.strides(),
                        values.options().device(at::kMeta))
          .expand(*shape);
    }
    throw;  // no shape to expand to: CPU's words
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_index_put_impl_",
         torch::CppFunction::makeFromBoxedFunction<&IndexPutImpl>());
}

}  // namespace
}  // namespace openreg::torch_backend
