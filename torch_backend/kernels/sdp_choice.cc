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
// The daemon runs CPU kernels, so openreg makes CPU's choice: where CPU
// would use its fused flash-attention kernel, `scaled_dot_product_attention`
// on openreg now calls `_scaled_dot_product_flash_attention_for_cpu` (and
// its backward), which the fallback sends to the daemon as single ops.
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>

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
  return at::cpu::_fused_sdp_choice(query, key, value, attn_mask, dropout_p,
                                    is_causal, scale, enable_gqa);
}

}  // namespace

REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &OpenregFusedSdpChoice)

}  // namespace at::native
