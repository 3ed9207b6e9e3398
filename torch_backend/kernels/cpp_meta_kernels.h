// ATen's C++ Meta kernels for the ops whose Meta key torch 2.13 gives a
// Python kernel instead.
//
// torch._meta_registrations registers Python Meta kernels (refs and
// decompositions, for symbolic shapes) over the C++ structured ones of
// about 600 ops, add and mul among them. openreg runs an op's Meta kernel
// on every Meta-cache miss, that is at every new shape: through Python an
// add's miss cost 87 us against 3 us for a hit, so a model whose shapes
// change at each step (a decode whose sequence grows) ran 10x slower than
// with its shapes cached. The C++ kernel is the one CPU's kernel runs
// (output shapes, dtypes and strides as CPU computes them), at a few
// microseconds. The ops listed in cpp_meta_kernels.cc call it directly;
// some without a C++ Meta kernel get one written there (native_layer_norm
// and its backward with CPU's kernel's own helpers; CPU's flash attention
// and its backward, openreg's SDPA route, as torch's Python kernels
// describe them; embedding_dense_backward; the fused SGD and Adagrad
// steps, which have no Meta kernel at all). torch's own Meta dispatch
// (FakeTensor, torch.compile) is left as it is.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_CPP_META_KERNELS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_CPP_META_KERNELS_H_

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

namespace openreg::torch_backend {

// `op`'s C++ Meta kernel, boxed, when it is listed and its signature matches
// the op's schema; null otherwise (the dispatcher's Meta kernel applies).
const c10::KernelFunction* CppMetaKernel(const c10::OperatorHandle& op);

// The listed ops that have a C++ Meta kernel in use ("aten::add.Tensor"),
// for tests.
std::vector<std::string> CppMetaKernelOps();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_CPP_META_KERNELS_H_
