#include "device_daemon/tensor_extent.h"

#include "absl/strings/str_cat.h"
#include "device_daemon/dtype.h"
#include "device_daemon/errors.h"

namespace openreg {
namespace {

// Tensors with more dimensions than this are rejected outright; real ones
// stay far below and the limit bounds the work done per TensorRef.
constexpr int kMaxDims = 64;

}  // namespace

absl::StatusOr<TensorExtent> ComputeTensorExtent(
    const proto::TensorRef& tensor) {
  TensorExtent extent;
  extent.element_size = DtypeElementSize(tensor.dtype());
  if (extent.element_size == 0) {
    return InvalidValueError(
        absl::StrCat("unknown dtype ", tensor.dtype(), " in tensor"));
  }
  const int dims = tensor.sizes_size();
  if (dims != tensor.strides_size()) {
    return InvalidValueError(absl::StrCat("tensor has ", dims, " sizes but ",
                                          tensor.strides_size(), " strides"));
  }
  if (dims > kMaxDims) {
    return InvalidValueError(absl::StrCat(
        "tensor has ", dims, " dimensions; the limit is ", kMaxDims));
  }
  int64_t numel = 1;
  int64_t max_index = 0;  // offset, in elements, of the furthest element
  bool overflow = false;
  for (int i = 0; i < dims; ++i) {
    const int64_t size = tensor.sizes(i);
    const int64_t stride = tensor.strides(i);
    if (size < 0) {
      return InvalidValueError(absl::StrCat(
          "tensor size ", size, " in dimension ", i, " is negative"));
    }
    if (stride < 0) {
      return InvalidValueError(absl::StrCat(
          "tensor stride ", stride, " in dimension ", i, " is negative"));
    }
    overflow |= __builtin_mul_overflow(numel, size, &numel);
    if (size > 0) {
      int64_t reach = 0;
      overflow |= __builtin_mul_overflow(size - 1, stride, &reach);
      overflow |= __builtin_add_overflow(max_index, reach, &max_index);
    }
  }
  if (!overflow && numel > 0) {
    int64_t span = 0;
    overflow |= __builtin_add_overflow(max_index, int64_t{1}, &span);
    overflow |= __builtin_mul_overflow(span, extent.element_size, &span);
    extent.span_bytes = static_cast<uint64_t>(span);
  }
  if (overflow) {
    return InvalidValueError("tensor sizes and strides overflow 64 bits");
  }
  extent.numel = numel;
  if (numel == 0) extent.span_bytes = 0;
  return extent;
}

}  // namespace openreg
