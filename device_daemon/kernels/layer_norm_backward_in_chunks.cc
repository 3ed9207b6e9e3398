#include "device_daemon/kernels/layer_norm_backward_in_chunks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "device_daemon/base/openmp_parallel.h"

namespace openreg::daemon {
namespace {

// native_layer_norm_backward(grad_out, input, normalized_shape, mean,
// rstd, weight, bias, output_mask) -> (grad_input, grad_weight, grad_bias)
constexpr size_t kGradOut = 0;
constexpr size_t kInput = 1;
constexpr size_t kNormalizedShape = 2;
constexpr size_t kMean = 3;
constexpr size_t kRstd = 4;
constexpr size_t kArguments = 8;
constexpr size_t kResults = 3;

int64_t DivideRoundingUp(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool IsLayerNormBackward(const c10::OperatorHandle& handle) {
  const c10::OperatorName& name = handle.operator_name();
  return name.name == "aten::native_layer_norm_backward" &&
         name.overload_name.empty();
}

void RunLayerNormBackwardInChunks(const c10::OperatorHandle& handle,
                                  torch::jit::Stack* stack, int threads) {
  TORCH_CHECK(stack->size() == kArguments && IsLayerNormBackward(handle),
              "RunLayerNormBackwardInChunks: not native_layer_norm_backward");
  const at::Tensor input = (*stack)[kInput].toTensor().contiguous();
  const at::Tensor grad_out = (*stack)[kGradOut].toTensor().contiguous();
  const at::Tensor mean = (*stack)[kMean].toTensor().contiguous();
  const at::Tensor rstd = (*stack)[kRstd].toTensor().contiguous();
  const std::vector<int64_t> normalized_shape =
      (*stack)[kNormalizedShape].toIntVector();
  const int64_t axis =
      input.dim() - static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(axis >= 0 && grad_out.sizes() == input.sizes(),
              "RunLayerNormBackwardInChunks: unexpected shapes");
  const int64_t rows = c10::multiply_integers(input.sizes().slice(0, axis));
  const int64_t row_elements =
      c10::multiply_integers(input.sizes().slice(axis));
  // at::parallel_for(0, rows, 1, ...) on `threads` threads.
  const int64_t chunks = std::min<int64_t>(threads, rows);
  if (chunks <= 1 || row_elements == 0) {
    handle.callBoxed(stack);
    return;
  }
  const int64_t chunk_rows = DivideRoundingUp(rows, chunks);
  const at::Tensor input_rows = input.view({rows, row_elements});
  const at::Tensor grad_out_rows = grad_out.view({rows, row_elements});
  const at::Tensor mean_rows = mean.view({rows});
  const at::Tensor rstd_rows = rstd.view({rows});
  std::vector<int64_t> chunk_shape = {0};
  chunk_shape.insert(chunk_shape.end(), normalized_shape.begin(),
                     normalized_shape.end());
  std::vector<torch::jit::Stack> chunks_arguments;
  for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
    const int64_t length = std::min(chunk_rows, rows - begin);
    chunk_shape[0] = length;
    torch::jit::Stack& chunk = chunks_arguments.emplace_back(*stack);
    chunk[kInput] = input_rows.narrow(0, begin, length).view(chunk_shape);
    chunk[kGradOut] = grad_out_rows.narrow(0, begin, length).view(chunk_shape);
    chunk[kMean] = mean_rows.narrow(0, begin, length);
    chunk[kRstd] = rstd_rows.narrow(0, begin, length);
  }
  RunOnOpenMpTeam(at::get_num_threads(), [&](int thread, int team_size) {
    // Thread-local, so the team's other threads start without it.
    const c10::InferenceMode inference_mode;
    for (size_t i = thread; i < chunks_arguments.size(); i += team_size) {
      handle.callBoxed(&chunks_arguments[i]);
    }
  });
  std::vector<at::Tensor> grad_input_chunks;
  std::array<at::Tensor, kResults> sums;
  for (const torch::jit::Stack& chunk : chunks_arguments) {
    TORCH_CHECK(chunk.size() == kResults,
                "RunLayerNormBackwardInChunks: unexpected results");
    grad_input_chunks.push_back(chunk[0].toTensor());
    for (size_t i = 1; i < kResults; ++i) {
      const at::Tensor part = chunk[i].toTensor();
      if (!part.defined()) continue;
      // From zero, in chunk order: the kernel's own sum of its buffers.
      sums[i] = sums[i].defined() ? sums[i].add_(part) : part.clone();
    }
  }
  at::Tensor grad_input;
  if (grad_input_chunks.front().defined()) {
    for (at::Tensor& part : grad_input_chunks) {
      part = part.view({-1, row_elements});
    }
    grad_input = at::cat(grad_input_chunks).view(input.sizes());
  }
  stack->clear();
  stack->emplace_back(std::move(grad_input));
  stack->emplace_back(std::move(sums[1]));
  stack->emplace_back(std::move(sums[2]));
}

}  // namespace openreg::daemon
