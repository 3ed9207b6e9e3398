#include "torch_backend/kernels/cpp_meta_kernels.h"

#include <ATen/MetaFunctions.h>
#include <ATen/core/op_registration/infer_schema.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_permuted.h>
#include <c10/core/SymIntArrayRef.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace openreg::torch_backend {
namespace {

struct ListedKernel {
  const char *name;      // after "aten::"
  const char *overload;  // "" for the default overload
  c10::KernelFunction kernel;
  c10::FunctionSchema inferred;  // from the C++ signature
};

template <class Signature, Signature *kFunction>
ListedKernel Entry(const char *name, const char *overload) {
  return {name, overload,
          c10::KernelFunction::makeFromUnboxedFunction(
              c10::CompileTimeFunctionPointer<Signature, kFunction>()),
          c10::inferFunctionSchemaFlattenedReturns<Signature>()};
}

// native_layer_norm has no C++ Meta kernel, and its Python one cost 730 us
// a call: its outputs as CPU's kernel makes them (layer_norm_cpu in
// aten/src/ATen/native/layer_norm.cpp, with its own checks and helpers):
// the output contiguous like the input, mean and rstd of the statistics'
// shape in the parameters' type when they are float and the input is
// reduced-precision. Anything the checks refuse goes to the synchronous
// path, which reports CPU's error.
std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeLayerNormMeta(
    const at::Tensor &input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor> &weight_or_none,
    const std::optional<at::Tensor> &bias_or_none, double /*eps*/) {
  const at::Tensor weight = weight_or_none.value_or(at::Tensor());
  const at::Tensor bias = bias_or_none.value_or(at::Tensor());
  const bool mixed_type = at::native::is_mixed_type(input, weight, bias);
  if (mixed_type) at::native::check_mixed_data_type(input, weight, bias);
  const c10::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  const int64_t rows =
      at::native::_check_layer_norm_inputs(input, shape, weight, bias).first;
  at::Tensor output =
      at::empty(input.sizes(), input.options(), at::MemoryFormat::Contiguous);
  const at::TensorOptions statistics =
      input.options().dtype(at::native::param_scalar_type(input, mixed_type));
  std::vector<int64_t> statistics_shape(input.sizes().begin(),
                                        input.sizes().end());
  std::fill(statistics_shape.end() - static_cast<int64_t>(shape.size()),
            statistics_shape.end(), 1);
  at::Tensor mean = at::empty({rows}, statistics).view(statistics_shape);
  at::Tensor rstd = at::empty({rows}, statistics).view(statistics_shape);
  return {std::move(output), std::move(mean), std::move(rstd)};
}

// Its backward has no C++ Meta kernel either, and its Python one runs on
// every new length of a training step: CPU's gradients
// (layer_norm_backward_cpu) are contiguous like the input and the
// parameters, in their types; a gradient output_mask leaves out is
// undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeLayerNormBackwardMeta(
    const at::Tensor & /*grad_out*/, const at::Tensor &input,
    c10::SymIntArrayRef normalized_shape, const at::Tensor & /*mean*/,
    const at::Tensor & /*rstd*/,
    const std::optional<at::Tensor> &weight_or_none,
    const std::optional<at::Tensor> &bias_or_none,
    std::array<bool, 3> output_mask) {
  const at::Tensor weight = weight_or_none.value_or(at::Tensor());
  const at::Tensor bias = bias_or_none.value_or(at::Tensor());
  at::native::_check_layer_norm_inputs(
      input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, bias);
  const auto contiguous_like = [](const at::Tensor &like) {
    TORCH_CHECK(like.defined(), "a gradient of an absent parameter");
    return at::empty(like.sizes(), like.options(),
                     at::MemoryFormat::Contiguous);
  };
  return {output_mask[0] ? contiguous_like(input) : at::Tensor(),
          output_mask[1] ? contiguous_like(weight) : at::Tensor(),
          output_mask[2] ? contiguous_like(bias) : at::Tensor()};
}

// An embedding's weight gradient (embedding_dense_backward_cpu): a
// contiguous (num_weights, dim) tensor in the gradient's type; its Python
// Meta kernel runs on every new length of a training step.
at::Tensor EmbeddingDenseBackwardMeta(const at::Tensor &grad_output,
                                      const at::Tensor &indices,
                                      c10::SymInt num_weights,
                                      c10::SymInt /*padding_idx*/,
                                      bool /*scale_grad_by_freq*/) {
  TORCH_CHECK(
      indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
      "embedding indices must be Long or Int");
  TORCH_CHECK(grad_output.dim() > 0, "a 0-dim embedding gradient");
  return at::empty({num_weights.expect_int(), grad_output.size(-1)},
                   grad_output.options());
}

// The type attention's logsumexp is computed in (torch._prims_common's
// get_computation_dtype).
at::ScalarType ComputationType(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
    case at::kBFloat16:
      return at::kFloat;
    case at::kComplexHalf:
      return at::kComplexFloat;
    default:
      return type;
  }
}

// CPU's flash attention (openreg's SDPA route, fused_attention.cc), 120 us
// a miss through Python: the same outputs as torch's Python Meta kernels
// for it (torch/_meta_registrations.py), which the rest of the route
// (MatchCpuOutputLayout, the daemon's out= handling) was built on.
std::tuple<at::Tensor, at::Tensor> FlashAttentionForCpuMeta(
    const at::Tensor &query, const at::Tensor & /*key*/,
    const at::Tensor & /*value*/, double /*dropout_p*/, bool /*is_causal*/,
    const std::optional<at::Tensor> & /*attn_mask*/,
    std::optional<double> /*scale*/) {
  at::Tensor attention = at::empty_like(query);
  at::Tensor logsumexp =
      at::empty({query.size(0), query.size(2), query.size(1)},
                query.options().dtype(ComputationType(query.scalar_type())))
          .transpose(1, 2);
  return {std::move(attention), std::move(logsumexp)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> FlashAttentionForCpuBackwardMeta(
    const at::Tensor & /*grad_out*/, const at::Tensor &query,
    const at::Tensor &key, const at::Tensor &value, const at::Tensor & /*out*/,
    const at::Tensor & /*logsumexp*/, double /*dropout_p*/, bool /*is_causal*/,
    const std::optional<at::Tensor> & /*attn_mask*/,
    std::optional<double> /*scale*/) {
  // CPU's gradients are (batch, length, heads, dim) buffers.
  const auto permuted = [](const at::Tensor &like) {
    return at::empty_permuted(like.sizes(), {0, 2, 1, 3}, like.options());
  };
  return {permuted(query), permuted(key), permuted(value)};
}

// The fused SGD and Adagrad steps (`fused=True`): in place on their lists,
// no results. torch 2.13 has no Meta kernel for them (the call raises), so
// every step ran synchronously. With nothing to compute here, a step is
// asynchronous; CPU's kernel checks the arguments at the first launch of
// each signature, which is checked (remote_fallback.cc).
template <typename LearningRate>
void FusedSgdMeta(at::TensorList /*self*/, at::TensorList /*grads*/,
                  at::TensorList /*momentum_buffer_list*/,
                  double /*weight_decay*/, double /*momentum*/,
                  LearningRate /*lr*/, double /*dampening*/, bool /*nesterov*/,
                  bool /*maximize*/, bool /*is_first_step*/,
                  const std::optional<at::Tensor> & /*grad_scale*/,
                  const std::optional<at::Tensor> & /*found_inf*/) {}

template <typename LearningRate>
void FusedAdagradMeta(at::TensorList /*self*/, at::TensorList /*grads*/,
                      at::TensorList /*state_sums*/,
                      at::TensorList /*state_steps*/, LearningRate /*lr*/,
                      double /*lr_decay*/, double /*weight_decay*/,
                      double /*eps*/, bool /*maximize*/,
                      const std::optional<at::Tensor> & /*grad_scale*/,
                      const std::optional<at::Tensor> & /*found_inf*/) {}

// Functional and in-place variants of the ops models use most (the
// signatures are the at::meta declarations of ATen/ops/*_meta_dispatch.h),
// and the ones written above.
std::vector<ListedKernel> ListedKernels() {
  using FusedSgd =
      void(at::TensorList, at::TensorList, at::TensorList, double, double,
           double, double, bool, bool, bool, const std::optional<at::Tensor> &,
           const std::optional<at::Tensor> &);
  using FusedSgdTensorLr = void(
      at::TensorList, at::TensorList, at::TensorList, double, double,
      const at::Tensor &, double, bool, bool, bool,
      const std::optional<at::Tensor> &, const std::optional<at::Tensor> &);
  using FusedAdagrad = void(at::TensorList, at::TensorList, at::TensorList,
                            at::TensorList, double, double, double, double,
                            bool, const std::optional<at::Tensor> &,
                            const std::optional<at::Tensor> &);
  using FusedAdagradTensorLr = void(
      at::TensorList, at::TensorList, at::TensorList, at::TensorList,
      const at::Tensor &, double, double, double, bool,
      const std::optional<at::Tensor> &, const std::optional<at::Tensor> &);
  return {
      Entry<FusedSgd, &FusedSgdMeta<double>>("_fused_sgd_", ""),
      Entry<FusedSgdTensorLr, &FusedSgdMeta<const at::Tensor &>>("_fused_sgd_",
                                                                 "tensor_lr"),
      Entry<FusedAdagrad, &FusedAdagradMeta<double>>("_fused_adagrad_", ""),
      Entry<FusedAdagradTensorLr, &FusedAdagradMeta<const at::Tensor &>>(
          "_fused_adagrad_", "tensor_lr"),
      Entry<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                const at::Tensor &, c10::SymIntArrayRef,
                const std::optional<at::Tensor> &,
                const std::optional<at::Tensor> &, double),
            &NativeLayerNormMeta>("native_layer_norm", ""),
      Entry<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                const at::Tensor &, const at::Tensor &, c10::SymIntArrayRef,
                const at::Tensor &, const at::Tensor &,
                const std::optional<at::Tensor> &,
                const std::optional<at::Tensor> &, std::array<bool, 3>),
            &NativeLayerNormBackwardMeta>("native_layer_norm_backward", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &, c10::SymInt,
                       c10::SymInt, bool),
            &EmbeddingDenseBackwardMeta>("embedding_dense_backward", ""),
      Entry<std::tuple<at::Tensor, at::Tensor>(
                const at::Tensor &, const at::Tensor &, const at::Tensor &,
                double, bool, const std::optional<at::Tensor> &,
                std::optional<double>),
            &FlashAttentionForCpuMeta>(
          "_scaled_dot_product_flash_attention_for_cpu", ""),
      Entry<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                const at::Tensor &, const at::Tensor &, const at::Tensor &,
                const at::Tensor &, const at::Tensor &, const at::Tensor &,
                double, bool, const std::optional<at::Tensor> &,
                std::optional<double>),
            &FlashAttentionForCpuBackwardMeta>(
          "_scaled_dot_product_flash_attention_for_cpu_backward", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Scalar &),
            &at::meta::add>("add", "Tensor"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Scalar &),
            &at::meta::add_>("add_", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Scalar &),
            &at::meta::sub>("sub", "Tensor"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Scalar &),
            &at::meta::sub_>("sub_", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::mul>(
          "mul", "Tensor"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &), &at::meta::mul_>(
          "mul_", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::div>(
          "div", "Tensor"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &), &at::meta::div_>(
          "div_", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       ::std::optional<c10::string_view>),
            &at::meta::div>("div", "Tensor_mode"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::pow>(
          "pow", "Tensor_Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::pow>(
          "pow", "Tensor_Tensor"),
      Entry<at::Tensor(const at::Scalar &, const at::Tensor &), &at::meta::pow>(
          "pow", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::maximum>("maximum", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::minimum>("minimum", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::eq>(
          "eq", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::ne>(
          "ne", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::lt>(
          "lt", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::gt>(
          "gt", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::le>(
          "le", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::ge>(
          "ge", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::eq>(
          "eq", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::ne>(
          "ne", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::lt>(
          "lt", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::gt>(
          "gt", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::le>(
          "le", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &), &at::meta::ge>(
          "ge", "Scalar"),
      Entry<at::Tensor(const at::Tensor &), &at::meta::exp>("exp", ""),
      Entry<at::Tensor &(at::Tensor &), &at::meta::exp_>("exp_", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::log>("log", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::sqrt>("sqrt", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::rsqrt>("rsqrt", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::tanh>("tanh", ""),
      Entry<at::Tensor &(at::Tensor &), &at::meta::tanh_>("tanh_", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::sigmoid>("sigmoid", ""),
      Entry<at::Tensor &(at::Tensor &), &at::meta::sigmoid_>("sigmoid_", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::neg>("neg", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::sin>("sin", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::cos>("cos", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::erf>("erf", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::reciprocal>("reciprocal",
                                                                   ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::silu>("silu", ""),
      Entry<at::Tensor &(at::Tensor &), &at::meta::silu_>("silu_", ""),
      Entry<at::Tensor(const at::Tensor &, c10::string_view), &at::meta::gelu>(
          "gelu", ""),
      Entry<at::Tensor &(at::Tensor &, c10::string_view), &at::meta::gelu_>(
          "gelu_", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::exp2>("exp2", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::log1p>("log1p", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::expm1>("expm1", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::floor>("floor", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::round>("round", ""),
      Entry<at::Tensor(const at::Tensor &, const ::std::optional<at::Scalar> &,
                       const ::std::optional<at::Scalar> &),
            &at::meta::clamp>("clamp", ""),
      Entry<at::Tensor &(at::Tensor &, const ::std::optional<at::Scalar> &,
                         const ::std::optional<at::Scalar> &),
            &at::meta::clamp_>("clamp_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &),
            &at::meta::clamp_min>("clamp_min", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Scalar &),
            &at::meta::clamp_min_>("clamp_min_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &),
            &at::meta::clamp_max>("clamp_max", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Scalar &),
            &at::meta::clamp_max_>("clamp_max_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Scalar &,
                       const at::Scalar &),
            &at::meta::threshold>("threshold", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Scalar &),
            &at::meta::threshold_backward>("threshold_backward", ""),
      Entry<at::Tensor(const at::Tensor &, at::OptionalIntArrayRef, bool,
                       ::std::optional<at::ScalarType>),
            &at::meta::sum>("sum", "dim_IntList"),
      Entry<at::Tensor(const at::Tensor &, at::OptionalIntArrayRef, bool,
                       ::std::optional<at::ScalarType>),
            &at::meta::mean>("mean", "dim"),
      Entry<at::Tensor(const at::Tensor &, at::IntArrayRef, bool),
            &at::meta::amax>("amax", ""),
      Entry<at::Tensor(const at::Tensor &, at::IntArrayRef, bool),
            &at::meta::amin>("amin", ""),
      Entry<at::Tensor(const at::Tensor &, ::std::optional<int64_t>, bool),
            &at::meta::argmax>("argmax", ""),
      Entry<at::Tensor(const at::Tensor &, ::std::optional<int64_t>, bool),
            &at::meta::argmin>("argmin", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::any>("any", ""),
      Entry<at::Tensor(const at::Tensor &), &at::meta::all>("all", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const at::Scalar &,
                       const at::Scalar &),
            &at::meta::addmm>("addmm", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Tensor &,
                         const at::Scalar &, const at::Scalar &),
            &at::meta::addmm_>("addmm_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::mm>(
          "mm", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &), &at::meta::bmm>(
          "bmm", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const at::Scalar &,
                       const at::Scalar &),
            &at::meta::baddbmm>("baddbmm", ""),
      Entry<at::Tensor(const at::Tensor &, int64_t, bool), &at::meta::_softmax>(
          "_softmax", ""),
      Entry<at::Tensor(const at::Tensor &, int64_t, bool),
            &at::meta::_log_softmax>("_log_softmax", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &, int64_t,
                       at::ScalarType),
            &at::meta::_softmax_backward_data>("_softmax_backward_data", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &, int64_t,
                       at::ScalarType),
            &at::meta::_log_softmax_backward_data>("_log_softmax_backward_data",
                                                   ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       c10::string_view),
            &at::meta::gelu_backward>("gelu_backward", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::tanh_backward>("tanh_backward", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::sigmoid_backward>("sigmoid_backward", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Scalar &), &at::meta::fill_>(
          "fill_", "Scalar"),
      Entry<at::Tensor &(at::Tensor &), &at::meta::zero_>("zero_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Scalar &),
            &at::meta::lerp>("lerp", "Scalar"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Scalar &),
            &at::meta::lerp_>("lerp_", "Scalar"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &),
            &at::meta::lerp>("lerp", "Tensor"),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Tensor &),
            &at::meta::lerp_>("lerp_", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const at::Scalar &),
            &at::meta::addcmul>("addcmul", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Tensor &,
                         const at::Scalar &),
            &at::meta::addcmul_>("addcmul_", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const at::Scalar &),
            &at::meta::addcdiv>("addcdiv", ""),
      Entry<at::Tensor &(at::Tensor &, const at::Tensor &, const at::Tensor &,
                         const at::Scalar &),
            &at::meta::addcdiv_>("addcdiv_", ""),
      Entry<::std::tuple<at::Tensor, at::Tensor>(
                const at::Tensor &, const at::Tensor &,
                const ::std::optional<at::Tensor> &, int64_t, int64_t),
            &at::meta::nll_loss_forward>("nll_loss_forward", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const ::std::optional<at::Tensor> &,
                       int64_t, int64_t, const at::Tensor &),
            &at::meta::nll_loss_backward>("nll_loss_backward", ""),
      Entry<at::Tensor(const at::Tensor &,
                       const c10::List<::std::optional<at::Tensor>> &),
            &at::meta::index>("index", "Tensor"),
      Entry<at::Tensor(const at::ITensorListRef &, int64_t), &at::meta::cat>(
          "cat", ""),
      Entry<std::tuple<at::Tensor, at::Tensor>(
                const at::Tensor &, at::IntArrayRef, at::IntArrayRef,
                at::IntArrayRef, at::IntArrayRef, bool),
            &at::meta::max_pool2d_with_indices>("max_pool2d_with_indices", ""),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &, at::IntArrayRef,
                       at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool,
                       const at::Tensor &),
            &at::meta::max_pool2d_with_indices_backward>(
          "max_pool2d_with_indices_backward", ""),
      Entry<at::Tensor(const at::Tensor &, int64_t,
                       ::std::optional<at::ScalarType>),
            &at::meta::cumsum>("cumsum", ""),
      Entry<at::Tensor(const at::Tensor &, int64_t), &at::meta::tril>("tril",
                                                                      ""),
      Entry<at::Tensor(const at::Tensor &, int64_t), &at::meta::triu>("triu",
                                                                      ""),
      Entry<at::Tensor &(at::Tensor &, int64_t), &at::meta::tril_>("tril_", ""),
      Entry<at::Tensor &(at::Tensor &, int64_t), &at::meta::triu_>("triu_", ""),
      Entry<::std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, int64_t,
                                                 int64_t, bool, bool),
            &at::meta::topk>("topk", ""),
      Entry<::std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, int64_t,
                                                 bool),
            &at::meta::max>("max", "dim"),
      Entry<::std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, int64_t,
                                                 bool),
            &at::meta::min>("min", "dim"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::bitwise_and>("bitwise_and", "Tensor"),
      Entry<at::Tensor(const at::Tensor &, const at::Tensor &),
            &at::meta::bitwise_or>("bitwise_or", "Tensor"),
      Entry<at::Tensor(const at::Tensor &), &at::meta::bitwise_not>(
          "bitwise_not", ""),
  };
}

struct Table {
  // By schema address: an operator's schema lives as long as it is
  // registered, and aten's are never deregistered.
  absl::flat_hash_map<const c10::FunctionSchema *, c10::KernelFunction> kernels;
  std::vector<std::string> names;
};

const Table &KernelTable() {
  static const Table *const table = [] {
    auto *built = new Table();
    for (ListedKernel &listed : ListedKernels()) {
      const std::optional<c10::OperatorHandle> op =
          c10::Dispatcher::singleton().findOp(c10::OperatorName(
              std::string("aten::") + listed.name, listed.overload));
      // A signature that does not fit the schema (another torch) is left
      // to the dispatcher's Meta kernel rather than mis-boxed.
      if (!op.has_value() ||
          c10::findSchemaDifferences(listed.inferred, op->schema())
              .has_value()) {
        continue;
      }
      built->kernels.emplace(&op->schema(), std::move(listed.kernel));
      built->names.push_back(c10::toString(op->operator_name()));
    }
    return built;
  }();
  return *table;
}

}  // namespace

const c10::KernelFunction *CppMetaKernel(const c10::OperatorHandle &op) {
  const Table &table = KernelTable();
  const auto found = table.kernels.find(&op.schema());
  return found == table.kernels.end() ? nullptr : &found->second;
}

std::vector<std::string> CppMetaKernelOps() { return KernelTable().names; }

}  // namespace openreg::torch_backend
