#include "torch_backend/kernels/output_layout.h"

#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <c10/core/TensorImpl.h>

#include <utility>

namespace openreg::torch_backend {
namespace {

// A CPU tensor with `tensor`'s metadata and no memory: enough for ATen's
// backend selection, which reads only metadata. Never read or written.
at::Tensor CpuStandIn(const at::Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, c10::Device(c10::kCPU)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
      tensor.dtype());
  impl->set_sizes_and_strides(tensor.sizes(), tensor.strides());
  return at::Tensor(std::move(impl));
}

// aten::convolution(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups): the memory format of the backend
// CPU's convolution selects for these arguments (the daemon runs it
// without autograd, so no backward is needed).
at::MemoryFormat CpuConvolutionFormat(c10::ArrayRef<c10::IValue> arguments) {
  const at::Tensor input = CpuStandIn(arguments[0].toTensor());
  const at::Tensor weight = CpuStandIn(arguments[1].toTensor());
  std::optional<at::Tensor> bias;
  if (arguments[2].isTensor()) bias = CpuStandIn(arguments[2].toTensor());
  const std::vector<c10::SymInt> stride = arguments[3].toSymIntVector();
  const std::vector<c10::SymInt> padding = arguments[4].toSymIntVector();
  const std::vector<c10::SymInt> dilation = arguments[5].toSymIntVector();
  const std::vector<c10::SymInt> output_padding = arguments[7].toSymIntVector();
  std::optional<c10::SymIntArrayRef> bias_sizes;
  if (bias.has_value()) bias_sizes = bias->sym_sizes();
  const at::native::ConvBackend backend = at::native::select_conv_backend(
      input, weight, bias, stride, padding, dilation, arguments[6].toBool(),
      output_padding, arguments[8].toSymInt(), bias_sizes);
  return at::native::_determine_backend_memory_format(input, weight, backend);
}

}  // namespace

bool MetaShapesDifferFromCpu(const c10::OperatorName& name) {
  return name.name == "aten::_embedding_bag" && name.overload_name.empty();
}

void MatchCpuOutputLayout(const c10::OperatorHandle& op,
                          c10::ArrayRef<c10::IValue> arguments,
                          std::vector<c10::IValue>* meta_outputs) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name != "aten::convolution" || !name.overload_name.empty()) return;
  const at::MemoryFormat format = CpuConvolutionFormat(arguments);
  at::Tensor& output = (*meta_outputs)[0].toTensor();
  if (!output.is_contiguous(format)) {
    (*meta_outputs)[0] = output.contiguous(format);
  }
}

}  // namespace openreg::torch_backend
