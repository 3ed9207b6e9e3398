// linspace / logspace / arange / range with out=, as CPU runs them.
//
// CPU's kernels keep an out tensor whose element count is already right,
// whatever its shape and strides, and fill its elements in order (through
// a contiguous temporary when it is not contiguous); only a wrong count
// makes them resize it. torch 2.13's Python Meta kernels resize such an out
// tensor to 1-D instead, which through the fallback alone would write the
// sequence as if `out` were flat from its storage offset: outside a
// narrowed or transposed view. So the sequence is computed by the fallback
// into a fresh 1-D tensor (which the Meta kernel sizes), then copied into
// `out`. (The functional forms of these ops call their out= forms, so this
// must not go through the functional op.)
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

void SequenceOut(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::IValue& out_argument = (*stack)[stack->size() - 1];
  at::Tensor out = out_argument.toTensor();
  // A 0-element tensor is resized without a warning, to the sequence's
  // length, contiguous.
  out_argument = at::empty({0}, out.options());
  RemoteFallback(op, stack);
  const at::Tensor sequence = torch::jit::pop(*stack).toTensor();
  // A wrong count: resized as CPU's kernels resize it (RangeFactories.cpp):
  // arange warns in its own words, the others resize silently.
  const int64_t count = sequence.numel();
  if (out.numel() != count) {
    if (op.schema().name() == "aten::arange" && out.numel() > 0) {
      TORCH_WARN("The number of elements in the out tensor of shape ",
                 out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ",
                 count,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (",
                 count, ",).");
    }
    out.resize_({count});
  }
  out.copy_(sequence.view(out.sizes()));
  torch::jit::push(*stack, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* overload :
       {"linspace.out", "linspace.Tensor_Tensor_out",
        "linspace.Tensor_Scalar_out", "linspace.Scalar_Tensor_out",
        "logspace.out", "logspace.Tensor_Tensor_out",
        "logspace.Tensor_Scalar_out", "logspace.Scalar_Tensor_out",
        "arange.out", "arange.start_out", "range.out", "range.out_"}) {
    m.impl(overload, torch::CppFunction::makeFromBoxedFunction<&SequenceOut>());
  }
}

}  // namespace
}  // namespace openreg::torch_backend
