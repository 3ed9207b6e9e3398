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
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
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
  // The CPU kernel's logsumexp is a (batch, length, heads) buffer viewed as
  // (batch, heads, length); the overrideable op's Meta kernel (what
  // torch.compile's generated code checks) declares it contiguous.
  return {std::move(output),
          logsumexp.contiguous(),
          at::Tensor(),
          at::Tensor(),
          query.sym_size(-2),
          key.sym_size(-2),
          at::empty({}, long_options),
          at::empty({}, long_options),
          at::Tensor()};
}

// The gradient of an additive attn_bias is the gradient of the scores it
// is added to, summed over the dimensions it was broadcast along:
// dS = P * (dO V^T - rowsum(dO * O)), with P = exp(S - logsumexp) from the
// forward's logsumexp. The flash kernel never forms S; this does (in
// float32, then the bias's dtype), as a bias gradient has S's shape anyway.
at::Tensor AttentionBiasGradient(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, const at::Tensor& out,
    const at::Tensor& logsumexp, bool is_causal, std::optional<double> scale) {
  const auto wide = [](const at::Tensor& tensor) {
    return tensor.to(at::kFloat);
  };
  const double softmax_scale =
      scale.has_value() ? *scale
                        : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  at::Tensor scores =
      at::matmul(wide(query), wide(key).transpose(-2, -1)) * softmax_scale +
      wide(attn_bias);
  if (is_causal) {
    const at::Tensor allowed = at::ones({query.size(-2), key.size(-2)},
                                        query.options().dtype(at::kBool))
                                   .tril();
    scores.masked_fill_(allowed.logical_not(),
                        -std::numeric_limits<float>::infinity());
  }
  at::Tensor probabilities = at::exp(scores - wide(logsumexp).unsqueeze(-1));
  // A row that masks every key has logsumexp -inf: no attention, no
  // gradient.
  probabilities.masked_fill_(probabilities.isnan(), 0);
  const at::Tensor grad_probabilities =
      at::matmul(wide(grad_out), wide(value).transpose(-2, -1));
  const at::Tensor row_terms = (wide(grad_out) * wide(out)).sum(-1, true);
  const at::Tensor grad_scores =
      probabilities * (grad_probabilities - row_terms);
  return at::sum_to(grad_scores, attn_bias.sizes()).to(attn_bias.scalar_type());
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
  std::optional<at::Tensor> mask;
  if (attn_bias.defined()) mask = attn_bias;
  auto [grad_query, grad_key, grad_value] =
      at::_scaled_dot_product_flash_attention_for_cpu_backward(
          grad_out, query, key, value, out, logsumexp, dropout_p, is_causal,
          mask, scale);
  at::Tensor grad_bias;
  if (grad_input_mask[3] && attn_bias.defined()) {
    grad_bias = AttentionBiasGradient(grad_out, query, key, value, attn_bias,
                                      out, logsumexp, is_causal, scale);
  }
  return {std::move(grad_query), std::move(grad_key), std::move(grad_value),
          std::move(grad_bias)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(FusedAttention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(FusedAttentionBackward));
}

}  // namespace openreg::torch_backend
