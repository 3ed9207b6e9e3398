// A DispatchStub registration for PrivateUse1 (REGISTER_PRIVATEUSE1_DISPATCH,
// ATen/native/DispatchStub.h).
//
// Most DispatchStubs are unreachable for openreg: they are called from
// per-backend kernels (CPU's structured kernels call `add_stub(kCPU, ...)`),
// and openreg's PrivateUse1 kernel for those ops is the boxed fallback,
// which sends the op whole to the daemon. A stub matters only where a
// device-generic (composite) implementation, running in the client, calls
// `stub(tensor.device().type(), ...)`. `scaled_dot_product_attention` is
// one: it asks `_fused_sdp_choice_stub` which attention backend to use,
// if `is_device_supported(device)` says the device registered one, and
// otherwise falls back to the unfused math decomposition (a dozen ops, with
// the attention matrix materialized).
//
// The daemon runs CPU kernels, so openreg asks CPU's selection: where CPU
// would use its fused flash-attention kernel, openreg answers OVERRIDEABLE,
// the route PyTorch reserves for an accelerator's own fused attention
// (kernels/fused_attention.cc, which runs CPU's flash kernel in the
// daemon); otherwise CPU's answer. A mask that needs a gradient, and
// dropout, keep CPU's answer too, so the ops run are CPU's: CPU's flash
// kernel gives no mask gradient (the overrideable backward computes one,
// for callers that ask it directly, by forming the scores, which the math
// route does as well); with dropout, CPU's flash kernel itself is called.
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>
#include <torch/library.h>

#include <optional>

namespace at::native {
namespace {

int64_t OpenregFusedSdpChoice(const at::Tensor& query, const at::Tensor& key,
                              const at::Tensor& value,
                              const std::optional<at::Tensor>& attn_mask,
                              double dropout_p, bool is_causal,
                              std::optional<double> scale, bool enable_gqa) {
  // CPU's selection looks only at shapes, dtypes, strides and flags (and
  // torch.backends' enable/disable switches), never at the data, so it
  // applies to openreg tensors unchanged. (CPU's kernel of the
  // _fused_sdp_choice op, which wraps CPU's stub entry: calling the stub
  // itself from outside libtorch needs DispatchStub internals that are
  // compiled with per-ISA variants and not usable from here.)
  const int64_t cpu_choice = at::cpu::_fused_sdp_choice(
      query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  const bool mask_needs_grad = attn_mask.has_value() && attn_mask->defined() &&
                               attn_mask->requires_grad();
  if (cpu_choice == static_cast<int64_t>(at::SDPBackend::flash_attention) &&
      !mask_needs_grad && dropout_p == 0.0) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  return cpu_choice;
}

}  // namespace

REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &OpenregFusedSdpChoice)

// The _fused_sdp_choice op (torch._fused_sdp_choice) gives the stub's
// answer, as CPU's and CUDA's kernels of the op do.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(OpenregFusedSdpChoice));
}

}  // namespace at::native
