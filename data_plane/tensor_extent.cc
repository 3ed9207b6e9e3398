#include "data_plane/tensor_extent.h"

#include "absl/strings/str_cat.h"
#include "data_plane/dtype.h"
#include "data_plane/error_codes.h"

namespace openreg {
namespace {

absl::Status Invalid(absl::string_view message) {
  return MakeError(proto::INVALID_VALUE, message);
}

}  // namespace

absl::StatusOr<TensorExtent> ComputeTensorExtent(
    int32_t dtype, absl::Span<const int64_t> sizes,
    absl::Span<const int64_t> strides) {
  TensorExtent extent;
  extent.element_size = DtypeElementSize(dtype);
  if (extent.element_size == 0) {
    return Invalid(absl::StrCat("unknown dtype ", dtype, " in tensor"));
  }
  const size_t dims = sizes.size();
  if (dims != strides.size()) {
    return Invalid(absl::StrCat("tensor has ", dims, " sizes but ",
                                strides.size(), " strides"));
  }
  if (dims > static_cast<size_t>(kMaxTensorDims)) {
    return Invalid(absl::StrCat("tensor has ", dims,
                                " dimensions; the limit is ", kMaxTensorDims));
  }
  int64_t numel = 1;
  int64_t max_index = 0;  // offset, in elements, of the furthest element
  bool overflow = false;
  for (size_t i = 0; i < dims; ++i) {
    const int64_t size = sizes[i];
    const int64_t stride = strides[i];
    if (size < 0) {
      return Invalid(absl::StrCat("tensor size ", size, " in dimension ", i,
                                  " is negative"));
    }
    if (stride < 0) {
      return Invalid(absl::StrCat("tensor stride ", stride, " in dimension ", i,
                                  " is negative"));
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
  if (overflow) return Invalid("tensor sizes and strides overflow 64 bits");
  extent.numel = numel;
  if (numel == 0) extent.span_bytes = 0;
  return extent;
}

int64_t StridedSpanElements(absl::Span<const int64_t> sizes,
                            absl::Span<const int64_t> strides) {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    last += (sizes[i] - 1) * strides[i];
  }
  return last + 1;
}

}  // namespace openreg
