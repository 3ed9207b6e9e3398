#include "torch_backend/kernels/output_layout.h"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace openreg::torch_backend {
namespace {

bool SuggestsChannelsLast(const at::Tensor& tensor) {
  const at::MemoryFormat format = tensor.suggest_memory_format();
  return format == at::MemoryFormat::ChannelsLast ||
         format == at::MemoryFormat::ChannelsLast3d;
}

// aten::convolution(input, weight, ...): the memory format of CPU's result,
// as ATen's _determine_backend_memory_format gives it for the x86 CPU
// backends, from metadata only. 2-d (4-D tensors): mkldnn and the slow
// path both give channels_last when the input or the weight is
// channels_last. 3-d: only mkldnn (float32 with oneDNN enabled) gives
// channels_last_3d; the slow path is contiguous. Complex convolutions are
// real ones on views and 1-d ones have no channels-last format: as the
// Meta kernel says. (ATen's select_conv_backend cannot be asked: it may
// copy its inputs.)
std::optional<at::MemoryFormat> CpuConvolutionFormat(
    c10::ArrayRef<c10::IValue> arguments) {
  const at::Tensor& input = arguments[0].toTensor();
  const at::Tensor& weight = arguments[1].toTensor();
  if (input.is_complex() ||
      (!SuggestsChannelsLast(input) && !SuggestsChannelsLast(weight))) {
    return std::nullopt;
  }
  if (input.dim() == 4) return at::MemoryFormat::ChannelsLast;
  if (input.dim() == 5 && input.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat &&
      at::globalContext().userEnabledMkldnn()) {
    return at::MemoryFormat::ChannelsLast3d;
  }
  return std::nullopt;
}

}  // namespace

bool MetaShapesDifferFromCpu(const c10::OperatorName& name) {
  if (name.name == "aten::_embedding_bag") return name.overload_name.empty();
  // Quantizing ops: the Meta kernel answers a float tensor.
  return name.name == "aten::quantize_per_tensor" ||
         name.name == "aten::quantize_per_tensor_dynamic" ||
         name.name == "aten::quantize_per_channel" ||
         name.name == "aten::_make_per_tensor_quantized_tensor" ||
         name.name == "aten::_make_per_channel_quantized_tensor";
}

void MatchCpuOutputLayout(const c10::OperatorHandle& op,
                          c10::ArrayRef<c10::IValue> arguments,
                          std::vector<c10::IValue>* meta_outputs) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name != "aten::convolution" || !name.overload_name.empty()) return;
  const std::optional<at::MemoryFormat> format =
      CpuConvolutionFormat(arguments);
  const at::Tensor& output = (*meta_outputs)[0].toTensor();
  if (format.has_value() && !output.is_contiguous(*format)) {
    (*meta_outputs)[0] = output.contiguous(*format);
  }
}

}  // namespace openreg::torch_backend
