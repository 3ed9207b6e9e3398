// Output layouts a Meta kernel cannot know.
//
// Meta tensors have no backend, so where CPU's kernel chooses its output's
// memory format by the backend it picks, torch 2.13's Meta kernel answers
// contiguous: convolution on channels_last inputs (mkldnn and the slow
// path give channels_last). Decided from metadata only. The client's output
// metadata is the single source of truth for what a user sees, so it must be
// CPU's.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_OUTPUT_LAYOUT_H_
#define OPENREG_TORCH_BACKEND_KERNELS_OUTPUT_LAYOUT_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace openreg::torch_backend {

// Ops whose Meta kernel gives outputs a different shape from CPU's kernel,
// and whose callers read that output: they run synchronously, with the
// shapes CPU gives. _embedding_bag (mode sum): CPU's fast path returns an
// empty offset2bag, which its backward then recomputes; the Meta kernel's
// full-size one would be zeros and give wrong gradients. The quantizing
// ops (quantize_per_tensor, ...): the Meta kernel answers float32.
bool MetaShapesDifferFromCpu(const c10::OperatorName& name);

// Restrides `meta_outputs` (the Meta kernel's results for `op(arguments)`)
// to the layout CPU's kernel gives them; leaves other ops' alone. Runs on
// Meta-cache misses only.
void MatchCpuOutputLayout(const c10::OperatorHandle& op,
                          c10::ArrayRef<c10::IValue> arguments,
                          std::vector<c10::IValue>* meta_outputs);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_OUTPUT_LAYOUT_H_
