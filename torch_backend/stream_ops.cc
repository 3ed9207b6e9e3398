// Stream-related kernels that never reach the daemon: Tensor.record_stream
// tells the caching allocator (block_cache.h) that a block is in use on
// another stream, as record_stream_cuda does for CUDA.
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <torch/library.h>

#include "torch_backend/device_allocator.h"

namespace openreg::torch_backend {
namespace {

void RecordStream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "openreg: record_stream expects an openreg stream, got ", stream);
  TORCH_CHECK(stream.device_index() == self.device().index(),
              "openreg: record_stream: the stream is on device ",
              static_cast<int>(stream.device_index()),
              " but the tensor is on device ",
              static_cast<int>(self.device().index()));
  GetDeviceAllocator().recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", &RecordStream);
}

}  // namespace
}  // namespace openreg::torch_backend
