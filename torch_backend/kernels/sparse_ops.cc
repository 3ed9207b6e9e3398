#include "torch_backend/kernels/sparse_ops.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

#include "torch_backend/kernels/op_routing.h"
#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {

void AdoptSparse(const at::Tensor& destination, const at::Tensor& result) {
  at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(destination);
  impl->raw_resize_(result.sparse_dim(), result.dense_dim(), result.sizes());
  impl->set_indices_and_values_unsafe(result._indices(), result._values());
  impl->set_coalesced(result.is_coalesced());
}

namespace {

// Sparse compressed layouts (CSR, CSC, BSR, BSC) have no openreg kernels:
// every op that reaches one fails at its call, naming op and layout.
void RefuseSparseCompressed(const c10::OperatorHandle& op,
                            torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "openreg: \"", op.operator_name(),
      "\" is not implemented for sparse compressed tensors (SparseCsr "
      "dispatch key: layouts torch.sparse_csr, sparse_csc, sparse_bsr, "
      "sparse_bsc); openreg supports strided and sparse COO tensors");
}

}  // namespace

int RouteSparseOpsToDaemon() {
  static const int routed = RouteAtenOps(
      c10::DispatchKey::SparsePrivateUse1,
      [](const c10::OperatorHandle& op) {
        return op.hasKernelForDispatchKey(c10::DispatchKey::SparseCPU);
      },
      [] {
        return torch::CppFunction::makeFromBoxedFunction<
            &RemoteSynchronousFallback>();
      });
  return routed;
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(
      torch::CppFunction::makeFromBoxedFunction<&RefuseSparseCompressed>());
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("_sparse_coo_tensor_with_dims",
         TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_",
         TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
}

}  // namespace openreg::torch_backend
