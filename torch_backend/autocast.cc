// Automatic mixed precision: the AutocastPrivateUse1 kernels behind
// torch.autocast("openreg"). The op lists are ATen's own (the AT_FORALL_*
// macros of ATen/autocast_mode.h, the lists CUDA registers), so openreg
// casts exactly like CUDA: matmul- and conv-like ops run in the autocast
// dtype, numerically sensitive ops in float32, mixed-input ops in the
// widest input type, and binary_cross_entropy is refused.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <optional>

namespace openreg::torch_backend {
namespace {

// binary_cross_entropy after a float16 sigmoid loses too much precision;
// CUDA refuses it under autocast with this message, and so does openreg.
at::Tensor BinaryCrossEntropyBanned(const at::Tensor& /*self*/,
                                    const at::Tensor& /*target*/,
                                    const std::optional<at::Tensor>& /*weight*/,
                                    int64_t /*reduction*/) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are "
      "unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy "
      "layer.\n"
      "In this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
      "BCEWithLogits are\n"
      "safe to autocast.");
}

}  // namespace

// Ops on no list pass straight through to the next dispatch key.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // The signature lists in AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE name
  // ATen types unqualified (they are written for namespace at::autocast).
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;

#define OPENREG_LOWER_PRECISION_FP(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_DIFFERENT_REDISPATCH_SIGNATURE(...) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(__VA_ARGS__)
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(
      OPENREG_DIFFERENT_REDISPATCH_SIGNATURE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)

#undef OPENREG_LOWER_PRECISION_FP
#undef OPENREG_FP32
#undef OPENREG_FP32_SET_OPT_DTYPE
#undef OPENREG_DIFFERENT_REDISPATCH_SIGNATURE
#undef OPENREG_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(BinaryCrossEntropyBanned));
}

}  // namespace openreg::torch_backend
