// nansum (and nanmean, which calls it) over `dim=[]`, as CPU runs it.
//
// CPU's kernel treats an empty dim list as "every dimension", like sum;
// torch 2.13's Python Meta kernel for nansum treats it as "no dimension"
// and answers the input's shape, so the client would allocate an output of
// the wrong shape and the daemon would report the mismatch at a later call.
// An empty list is sent as None (every dimension) instead: the same
// reduction, and the Meta kernel then agrees with CPU.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

void EmptyDimListReducesAll(const c10::OperatorHandle& op,
                            torch::jit::Stack* stack) {
  const size_t num_arguments = op.schema().arguments().size();
  // nansum(Tensor self, int[1]? dim, bool keepdim, *, ScalarType? dtype
  // [, Tensor(a!) out]): `dim` is the second argument.
  c10::IValue& dim = (*stack)[stack->size() - num_arguments + 1];
  if (dim.isIntList() && dim.toIntList().empty()) dim = c10::IValue();
  RemoteFallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nansum",
         torch::CppFunction::makeFromBoxedFunction<&EmptyDimListReducesAll>());
  m.impl("nansum.out",
         torch::CppFunction::makeFromBoxedFunction<&EmptyDimListReducesAll>());
}

}  // namespace
}  // namespace openreg::torch_backend
