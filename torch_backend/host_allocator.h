// Pinned host memory for openreg (tensor.pin_memory(), pin_memory=True,
// DataLoader pinning): torch's CachingHostAllocatorImpl (the same cache
// CUDA uses) over openreg::HostAlloc, registered as the PrivateUse1 host
// allocator. A freed block is reused only after events recorded on every
// stream that used it (RecordPinnedUse) have completed.
#ifndef OPENREG_TORCH_BACKEND_HOST_ALLOCATOR_H_
#define OPENREG_TORCH_BACKEND_HOST_ALLOCATOR_H_

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>

namespace openreg::torch_backend {

at::HostAllocator& GetHostAllocator();

// True when [data, data + bytes) lies in openreg pinned memory of the
// current session (copies with it go straight to the daemon).
bool IsPinnedRange(const void* data, size_t bytes);

// Marks `tensor`'s pinned storage as used by `stream`: its block is not
// reused before the work queued on `stream` so far has finished.
void RecordPinnedUse(const at::Tensor& tensor, const c10::Stream& stream);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_HOST_ALLOCATOR_H_
