// torch.openreg.set_sync_debug_mode, as torch.cuda.set_sync_debug_mode: in
// "warn" mode every call that makes the host wait for the device warns, in
// "error" mode it raises. A wait costs a daemon round trip here, so hidden
// ones are worth finding.
//
// What counts follows CUDA (c10/cuda/CUDAFunctions.h): copies to the host
// that wait (.item(), .cpu(), .tolist(), copy_ to CPU), blocking copies
// with pinned memory, Stream.synchronize(), and here also every op the
// daemon must run before the call returns (data-dependent output shapes
// such as nonzero / masked_select, ops without a Meta kernel). As on CUDA,
// torch.openreg.synchronize() and Event.synchronize() do not count: they
// are explicit requests to wait. docs/OBSERVABILITY.md has the full list.
#ifndef OPENREG_TORCH_BACKEND_SYNC_DEBUG_H_
#define OPENREG_TORCH_BACKEND_SYNC_DEBUG_H_

#include <c10/macros/Macros.h>

#include <atomic>
#include <string_view>

namespace openreg::torch_backend {

enum class SyncDebugMode : int { kDefault = 0, kWarn = 1, kError = 2 };

// Process-wide, as on CUDA.
void SetSyncDebugMode(SyncDebugMode mode);
SyncDebugMode GetSyncDebugMode();

namespace sync_debug_internal {
extern std::atomic<int> mode;
}  // namespace sync_debug_internal

// One relaxed load: the per-op path's whole cost while the mode is off.
inline bool SyncDebugEnabled() {
  return C10_UNLIKELY(
      sync_debug_internal::mode.load(std::memory_order_relaxed) != 0);
}

// Warns or raises per the mode; `what` names the call that waits.
void WarnOrErrorOnSyncSlow(std::string_view what);

// Called before each wait listed above.
inline void WarnOrErrorOnSync(const char* what) {
  if (SyncDebugEnabled()) WarnOrErrorOnSyncSlow(what);
}

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_SYNC_DEBUG_H_
