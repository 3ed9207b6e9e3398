// CPU kernels, registered in the daemon's own dispatcher, for ATen ops that
// exist only on CUDA but that ATen's device-generic code sends every
// non-CPU device to. The client's boxed fallback forwards such an op by name
// and the daemon looks it up here like any other CPU kernel (see
// docs/EXTENDING.md, "Built-in daemon kernels").
//
// ATen's RNN code (aten/src/ATen/native/RNN.cpp) runs the LSTM and GRU cells
// of CUDA, XPU and PrivateUse1 tensors through the fused `_thnn_fused_*`
// ops, which only CUDA implements (aten/src/ATen/native/cuda/RNN.cu). These
// kernels compute the same results and workspaces from ATen ops; the
// workspaces are produced and consumed only by these kernels, but follow
// CUDA's layouts so that the shapes match the Meta kernels the client runs.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace openreg::daemon {
namespace {

// Gates with both biases added (when given), as CUDA's kernels add them.
at::Tensor AddBiases(const at::Tensor& gates,
                     const std::optional<at::Tensor>& bias) {
  if (bias.has_value() && bias->defined()) return gates + *bias;
  return gates;
}

void CheckCellSizes(const char* op, const at::Tensor& input_gates,
                    const at::Tensor& hidden_gates, const at::Tensor& state,
                    int64_t gate_count) {
  TORCH_CHECK(
      input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(), op,
      ": input_gates and hidden_gates must be 2-D and of the same "
      "size, got ",
      input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * gate_count == input_gates.size(1),
              op, ": expected a state of size [", input_gates.size(0), ", ",
              input_gates.size(1) / gate_count, "], got ", state.sizes());
}

// hy, cy and the workspace (the activated gates i, f, g, o, side by side).
std::tuple<at::Tensor, at::Tensor, at::Tensor> FusedLstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  CheckCellSizes("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, 4);
  const at::Tensor gates =
      AddBiases(AddBiases(input_gates + hidden_gates, input_bias), hidden_bias);
  std::vector<at::Tensor> chunks = gates.chunk(4, /*dim=*/1);
  const at::Tensor input_gate = chunks[0].sigmoid();
  const at::Tensor forget_gate = chunks[1].sigmoid();
  const at::Tensor cell_gate = chunks[2].tanh();
  const at::Tensor output_gate = chunks[3].sigmoid();
  at::Tensor cy = forget_gate * cx + input_gate * cell_gate;
  at::Tensor hy = output_gate * cy.tanh();
  at::Tensor workspace =
      at::cat({input_gate, forget_gate, cell_gate, output_gate}, /*dim=*/1);
  return {std::move(hy), std::move(cy), std::move(workspace)};
}

// grad_gates (pre-activation), grad_cx and, with biases, the bias gradient.
std::tuple<at::Tensor, at::Tensor, at::Tensor> FusedLstmCellBackwardImpl(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const bool has_grad_hy = grad_hy.has_value() && grad_hy->defined();
  const bool has_grad_cy = grad_cy.has_value() && grad_cy->defined();
  if (!has_grad_hy && !has_grad_cy) return {};
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) == 4 * cx.size(1),
              "_thnn_fused_lstm_cell_backward_impl: workspace of size ",
              workspace.sizes(), " does not match cx of size ", cx.sizes());
  std::vector<at::Tensor> chunks = workspace.chunk(4, /*dim=*/1);
  const at::Tensor& input_gate = chunks[0];
  const at::Tensor& forget_gate = chunks[1];
  const at::Tensor& cell_gate = chunks[2];
  const at::Tensor& output_gate = chunks[3];
  // A missing gradient is zero, as in CUDA's kernel.
  const at::Tensor grad_h = has_grad_hy ? *grad_hy : at::zeros_like(cx);
  const at::Tensor tanh_cy = cy.tanh();
  at::Tensor grad_c = grad_h * output_gate * (1 - tanh_cy * tanh_cy);
  if (has_grad_cy) grad_c = grad_c + *grad_cy;
  const at::Tensor grad_input =
      grad_c * cell_gate * input_gate * (1 - input_gate);
  const at::Tensor grad_forget = grad_c * cx * forget_gate * (1 - forget_gate);
  const at::Tensor grad_cell =
      grad_c * input_gate * (1 - cell_gate * cell_gate);
  const at::Tensor grad_output =
      grad_h * tanh_cy * output_gate * (1 - output_gate);
  at::Tensor grad_gates =
      at::cat({grad_input, grad_forget, grad_cell, grad_output}, /*dim=*/1);
  at::Tensor grad_cx = grad_c * forget_gate;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), std::move(grad_cx), std::move(grad_bias)};
}

// hy and the workspace: reset, update and new gates, hx, and the hidden
// part of the new gate (with its bias), side by side ([batch, 5 * hidden]).
std::tuple<at::Tensor, at::Tensor> FusedGruCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  CheckCellSizes("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, 3);
  std::vector<at::Tensor> input =
      AddBiases(input_gates, input_bias).chunk(3, 1);
  std::vector<at::Tensor> hidden =
      AddBiases(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset_gate = (input[0] + hidden[0]).sigmoid();
  const at::Tensor update_gate = (input[1] + hidden[1]).sigmoid();
  const at::Tensor new_gate = (input[2] + reset_gate * hidden[2]).tanh();
  at::Tensor hy = new_gate + update_gate * (hx - new_gate);
  at::Tensor workspace =
      at::cat({reset_gate, update_gate, new_gate, hx, hidden[2]}, /*dim=*/1);
  return {std::move(hy), std::move(workspace)};
}

// grad_input_gates, grad_hidden_gates, grad_hx and, with biases, the two
// bias gradients.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
FusedGruCellBackward(const at::Tensor& grad_hy, const at::Tensor& workspace,
                     bool has_bias) {
  TORCH_CHECK(workspace.dim() == 2 && grad_hy.dim() == 2 &&
                  workspace.size(1) == 5 * grad_hy.size(1) &&
                  workspace.size(0) == grad_hy.size(0),
              "_thnn_fused_gru_cell_backward: workspace of size ",
              workspace.sizes(), " does not match grad_hy of size ",
              grad_hy.sizes());
  std::vector<at::Tensor> chunks = workspace.chunk(5, /*dim=*/1);
  const at::Tensor& reset_gate = chunks[0];
  const at::Tensor& update_gate = chunks[1];
  const at::Tensor& new_gate = chunks[2];
  const at::Tensor& hx = chunks[3];
  const at::Tensor& hidden_new = chunks[4];
  const at::Tensor grad_update =
      grad_hy * (hx - new_gate) * update_gate * (1 - update_gate);
  at::Tensor grad_hx = grad_hy * update_gate;
  const at::Tensor grad_new =
      grad_hy * (1 - update_gate) * (1 - new_gate * new_gate);
  const at::Tensor grad_hidden_new = grad_new * reset_gate;
  const at::Tensor grad_reset =
      grad_new * hidden_new * reset_gate * (1 - reset_gate);
  at::Tensor grad_input_gates =
      at::cat({grad_reset, grad_update, grad_new}, /*dim=*/1);
  at::Tensor grad_hidden_gates =
      at::cat({grad_reset, grad_update, grad_hidden_new}, /*dim=*/1);
  at::Tensor grad_input_bias =
      has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias =
      has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {std::move(grad_input_gates), std::move(grad_hidden_gates),
          std::move(grad_hx), std::move(grad_input_bias),
          std::move(grad_hidden_bias)};
}

}  // namespace

// CPU, because the daemon runs every op on CPU tensors that wrap device
// memory. These ops have no CPU kernel in ATen, so nothing is replaced.
TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(FusedLstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl",
         TORCH_FN(FusedLstmCellBackwardImpl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(FusedGruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(FusedGruCellBackward));
}

}  // namespace openreg::daemon
