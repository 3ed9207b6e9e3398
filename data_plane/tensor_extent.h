// The bytes a strided tensor view touches, from its sizes and strides: the
// one place this arithmetic is written. The daemon checks every TensorRef a
// client sends with ComputeTensorExtent before touching memory; code that
// holds trusted metadata (its own tensors) uses StridedSpanElements.
// Free of ATen and protobuf so that both sides and every layer can use it.
#ifndef OPENREG_DATA_PLANE_TENSOR_EXTENT_H_
#define OPENREG_DATA_PLANE_TENSOR_EXTENT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace openreg {

// Tensors with more dimensions than this are rejected outright: the limit
// bounds the work done per decoded tensor (16 KiB of sizes and strides).
// ATen itself has no such limit (CPU adds and sums 65-dim tensors; only a
// few kernels, argmax among them, refuse more than 64), so it sits far
// above what any program uses.
inline constexpr int kMaxTensorDims = 1024;

struct TensorExtent {
  int64_t element_size = 0;
  int64_t numel = 0;
  // Bytes from element 0 to one past the last byte of the element with the
  // largest offset; 0 when numel == 0. Strides are non-negative, so element
  // 0 has the smallest offset.
  uint64_t span_bytes = 0;
};

// For untrusted metadata. INVALID_VALUE for a dtype not in data_plane/
// dtype.h, sizes and strides of different lengths, more than
// kMaxTensorDims dimensions, negative sizes or strides, or values whose
// products overflow 64 bits.
absl::StatusOr<TensorExtent> ComputeTensorExtent(
    int32_t dtype, absl::Span<const int64_t> sizes,
    absl::Span<const int64_t> strides);

// For trusted metadata (no checks): the number of elements from element 0
// to one past the furthest element, 0 when any size is 0. Multiply by the
// element size for bytes.
int64_t StridedSpanElements(absl::Span<const int64_t> sizes,
                            absl::Span<const int64_t> strides);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_TENSOR_EXTENT_H_
