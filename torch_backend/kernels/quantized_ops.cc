// Per-tensor affine quantized tensors on openreg (qint8, quint8, qint32):
// ATen's QTensorImpl over device memory, dispatch key QuantizedPrivateUse1.
// PyTorch 2.13 deprecates the quantized dtypes, so this stays small:
//
// - Metadata (q_scale, q_zero_point, qscheme, views, empty tensors) is
//   ATen's own device-generic kernels, registered here as ATen registers
//   them for QuantizedCPU: they touch no element.
// - Every other op with a QuantizedCPU kernel goes to the daemon whole,
//   synchronously (RemoteSynchronousFallback, registered explicitly for
//   QuantizedPrivateUse1 by RouteQuantizedOpsToDaemon, as composite kernels
//   outrank a fallback): the quantizer travels with the TensorRef
//   (protos/commands.proto) and the daemon runs CPU's quantized kernel
//   (dequantize, int_repr, relu, cat, ...). Ops CPU has no quantized kernel
//   for fail at the call, as on CPU (NotImplementedError for most).
// - set_ and resize_ are refused: a quantized tensor is made by
//   quantize_per_tensor or copied, never re-pointed.
// - quantize_per_tensor takes a float tensor (so it reaches the dense
//   fallback), and its Meta kernel answers float32: it runs synchronously
//   with the result the daemon's kernel makes (MetaShapesDifferFromCpu).
// - Copies to and from the CPU are byte copies of the integer
//   representation (`_copy_from` below); copy_ sets the quantizer.
#include "torch_backend/kernels/quantized_ops.h"

#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/empty_strided_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {

namespace {

using SqueezeDims = at::Tensor (*)(const at::Tensor&, at::IntArrayRef);
using SqueezeDim = at::Tensor (*)(const at::Tensor&, int64_t);
using SqueezeAll = at::Tensor (*)(const at::Tensor&);

void RefuseRepointing(const c10::OperatorHandle& op,
                      torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "openreg: \"", op.operator_name(),
      "\" is not supported for quantized tensors (make them with "
      "quantize_per_tensor, or copy them)");
}

}  // namespace

int RouteQuantizedOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::QuantizedPrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.hasKernelForDispatchKey(c10::DispatchKey::QuantizedCPU);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<
            &RemoteSynchronousFallback>();
      });
  return routed;
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_unknown_quantized));
  m.impl("empty_strided",
         TORCH_FN(at::native::empty_strided_unknown_quantized));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_quantized));
  m.impl("squeeze", static_cast<SqueezeAll>(at::native::squeeze_quantized));
  m.impl("squeeze.dim", static_cast<SqueezeDim>(at::native::squeeze_quantized));
  m.impl("squeeze.dims",
         static_cast<SqueezeDims>(at::native::squeeze_quantized));
  m.impl("unsqueeze", TORCH_FN(at::native::unsqueeze_quantized));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("set_.source_Storage_storage_offset",
         torch::CppFunction::makeFromBoxedFunction<&RefuseRepointing>());
  m.impl("resize_",
         torch::CppFunction::makeFromBoxedFunction<&RefuseRepointing>());
  m.impl("_empty_affine_quantized",
         TORCH_FN(at::native::empty_affine_quantized));
  m.impl("empty_quantized", TORCH_FN(at::native::empty_quantized));
  m.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
  m.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
  m.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_qtensorimpl));
  m.impl("view", TORCH_FN(at::native::view_symint));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias_symint));
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(
      torch::CppFunction::makeFromBoxedFunction<&RemoteSynchronousFallback>());
}

}  // namespace openreg::torch_backend
