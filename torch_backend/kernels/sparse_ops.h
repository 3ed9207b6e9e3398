// Sparse COO tensors on openreg: a SparseTensorImpl whose indices and
// values are openreg tensors (dispatch key SparsePrivateUse1).
//
// The ops that only handle metadata (construction, _indices, _values, nnz,
// the coalesced flag, resize, clone, zero_) are ATen's own device-generic
// kernels, registered here as ATen registers them for SparseCPU and
// SparseCUDA: they touch no element. Every other op with a sparse argument
// goes to the daemon whole (RemoteSynchronousFallback, remote_fallback.cc),
// synchronously: the number of non-zeros of a sparse result depends on
// values. There CPU's sparse kernel runs on the same indices and values,
// and a sparse result comes back as new device indices and values. Sparse
// layouts other than COO (CSR, CSC, BSR, BSC) have no openreg kernels and
// raise NotImplementedError at the call.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_SPARSE_OPS_H_
#define OPENREG_TORCH_BACKEND_KERNELS_SPARSE_OPS_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg::torch_backend {

// Registers RemoteSynchronousFallback for SparsePrivateUse1 on every aten op
// that has a SparseCPU kernel of its own and no openreg one. Needed because
// a CompositeExplicitAutograd kernel outranks a backend fallback, and some
// (sum, which would become sum.dim_IntList over no dims: the identity for
// sparse tensors) mean something else for sparse tensors than the kernel
// CPU registers. Idempotent; returns the number of ops routed.
int RouteSparseOpsToDaemon();

// Makes the sparse tensor `destination` (an in-place or out= argument)
// hold `result`'s sizes, indices, values and coalesced flag.
void AdoptSparse(const at::Tensor& destination, const at::Tensor& result);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_SPARSE_OPS_H_
