// The overrideable fused-attention route (SDPBackend::overrideable): the
// ops PyTorch reserves for an accelerator's own fused attention,
// `_scaled_dot_product_fused_attention_overrideable` and its backward.
//
// `scaled_dot_product_attention` calls them when `_fused_sdp_choice`
// answers OVERRIDEABLE (kernels/sdp_choice.cc: wherever CPU would use its
// fused flash kernel). openreg's fused kernel is that CPU kernel, run in
// the daemon: each op here launches `_scaled_dot_product_flash_attention_
// for_cpu` (or its backward) as one asynchronous op through the fallback,
// one pass over the keys with an online softmax, never materializing the
// attention matrix, and returns its results in the overrideable ops'
// shape. The extra returns of the forward (cumulative sequence lengths,
// RNG state, debug mask) are for variable-length and dropout kernels;
// openreg's route takes dropout 0 only and returns them empty, as the Meta
// kernel describes them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace openreg::torch_backend {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
           c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
FusedAttention(const at::Tensor& query, const at::Tensor& key,
               const at::Tensor& value,
               const std::optional<at::Tensor>& attn_bias, double dropout_p,
               bool is_causal, bool return_debug_mask,
               std::optional<double> scale) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      dropout_p == 0.0 && !return_debug_mask,
      "openreg: the overrideable fused attention runs without dropout and "
      "debug mask (the SDPA backend selection sends those to the math route)");
  auto [output, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
      query, key, value, dropout_p, is_causal, attn_bias, scale);
  const at::TensorOptions long_options = query.options().dtype(at::kLong);
  return {std::move(output),
          std::move(logsumexp),
          at::Tensor(),
          at::Tensor(),
          query.sym_size(-2),
          key.sym_size(-2),
          at::empty({}, long_options),
          at::empty({}, long_options),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
FusedAttentionBackward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, int64_t /*max_q*/, int64_t /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(grad_input_mask[3] && attn_bias.defined()),
      "openreg: the overrideable fused attention computes no gradient for "
      "attn_bias (the SDPA backend selection sends such masks to the math "
      "route)");
  std::optional<at::Tensor> mask;
  if (attn_bias.defined()) mask = attn_bias;
  auto [grad_query, grad_key, grad_value] =
      at::_scaled_dot_product_flash_attention_for_cpu_backward(
          grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
          mask, scale);
  return {std::move(grad_query), std::move(grad_key), std::move(grad_value),
          at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(FusedAttention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(FusedAttentionBackward));
}

}  // namespace openreg::torch_backend
