// An example openreg extension: a custom operator whose kernel runs inside
// the daemon. One shared library serves both processes:
//
//   daemon:  openreg-daemon --kernel_library=.../libopenreg_ext.so
//            gets the schema and the CPU kernel, which it runs on openreg
//            memory when a client launches the op;
//   client:  torch.ops.load_library(".../libopenreg_ext.so")
//            gets the schema, the Meta kernel (so that the boxed fallback
//            learns the output's shape and launches asynchronously) and the
//            autograd formula. Its PrivateUse1 key has no kernel, so
//            openreg's boxed fallback sends the op to the daemon by name;
//            the CPU kernel serves CPU tensors in the client.
//
// scaled_gelu(x, scale) = scale * gelu(x); its backward is a second op,
// scaled_gelu_backward, so that gradients are computed in the daemon too.
// See docs/EXTENDING.md; tested by tests/python/test_extending.py.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace openreg_ext {
namespace {

at::Tensor ScaledGeluCpu(const at::Tensor& x, double scale) {
  // A warning that depends on the data, as real kernels raise some: on
  // openreg it reaches the client at its next synchronization.
  if (x.isnan().any().item<bool>()) {
    TORCH_WARN("scaled_gelu: the input holds NaN");
  }
  return at::gelu(x) * scale;
}

at::Tensor ScaledGeluBackwardCpu(const at::Tensor& grad, const at::Tensor& x,
                                 double scale) {
  // d/dx scale * gelu(x) = scale * gelu'(x); gelu_backward applies gelu'.
  return at::gelu_backward(grad * scale, x);
}

// Shape-only kernels: the same output layout as the CPU kernels (a fresh
// contiguous-like tensor shaped like `x`), without computing anything.
at::Tensor ScaledGeluMeta(const at::Tensor& x, double /*scale*/) {
  return at::empty_like(x);
}

at::Tensor ScaledGeluBackwardMeta(const at::Tensor& /*grad*/,
                                  const at::Tensor& x, double /*scale*/) {
  return at::empty_like(x);
}

// Calls the ops through the dispatcher, so that each reaches the kernel of
// its tensors' device: CPU in the client, openreg's fallback (and so the
// daemon's CPU kernel) for openreg tensors.
at::Tensor CallScaledGelu(const at::Tensor& x, double scale) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("openreg_ext::scaled_gelu", "")
                             .typed<at::Tensor(const at::Tensor&, double)>();
  return op.call(x, scale);
}

at::Tensor CallScaledGeluBackward(const at::Tensor& grad, const at::Tensor& x,
                                  double scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("openreg_ext::scaled_gelu_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(grad, x, scale);
}

class ScaledGeluFunction
    : public torch::autograd::Function<ScaledGeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* context,
                            const at::Tensor& x, double scale) {
    // Below autograd: the call reaches the backend kernel, not this one.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    context->save_for_backward({x});
    context->saved_data["scale"] = scale;
    return CallScaledGelu(x, scale);
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* context,
      torch::autograd::variable_list grad_outputs) {
    const at::Tensor x = context->get_saved_variables()[0];
    const double scale = context->saved_data["scale"].toDouble();
    // No gradient for `scale` (a float, not a tensor).
    return {CallScaledGeluBackward(grad_outputs[0], x, scale), at::Tensor()};
  }
};

at::Tensor ScaledGeluAutograd(const at::Tensor& x, double scale) {
  return ScaledGeluFunction::apply(x, scale);
}

}  // namespace

TORCH_LIBRARY(openreg_ext, m) {
  m.def("scaled_gelu(Tensor x, float scale) -> Tensor");
  m.def("scaled_gelu_backward(Tensor grad, Tensor x, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(openreg_ext, CPU, m) {
  m.impl("scaled_gelu", TORCH_FN(ScaledGeluCpu));
  m.impl("scaled_gelu_backward", TORCH_FN(ScaledGeluBackwardCpu));
}

TORCH_LIBRARY_IMPL(openreg_ext, Meta, m) {
  m.impl("scaled_gelu", TORCH_FN(ScaledGeluMeta));
  m.impl("scaled_gelu_backward", TORCH_FN(ScaledGeluBackwardMeta));
}

// `Autograd` covers every backend's autograd key, AutogradPrivateUse1
// included. The backward op needs no formula: it is not differentiated
// twice in this example (double backward raises).
TORCH_LIBRARY_IMPL(openreg_ext, Autograd, m) {
  m.impl("scaled_gelu", TORCH_FN(ScaledGeluAutograd));
}

}  // namespace openreg_ext
