// The bytes a strided tensor view touches, computed from a TensorRef before
// any of its memory is used. Every field comes from an untrusted client, so
// each step is checked for negative values and 64-bit overflow.
#ifndef OPENREG_DEVICE_DAEMON_TENSOR_EXTENT_H_
#define OPENREG_DEVICE_DAEMON_TENSOR_EXTENT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "protos/commands.pb.h"

namespace openreg {

struct TensorExtent {
  int64_t element_size = 0;
  int64_t numel = 0;
  // Bytes from element 0 (the TensorRef's address) to one past the last
  // byte of the element with the largest offset; 0 when numel == 0.
  // Strides are non-negative, so element 0 has the smallest offset.
  uint64_t span_bytes = 0;
};

// INVALID_VALUE for a dtype the daemon does not know, sizes and strides of
// different lengths, negative sizes or strides, or sizes that overflow.
absl::StatusOr<TensorExtent> ComputeTensorExtent(
    const proto::TensorRef& tensor);

}  // namespace openreg

#endif  // OPENREG_DEVICE_DAEMON_TENSOR_EXTENT_H_
