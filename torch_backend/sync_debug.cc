#include "torch_backend/sync_debug.h"

#include <c10/util/Exception.h>

namespace openreg::torch_backend {

namespace sync_debug_internal {

std::atomic<int> mode{0};

}  // namespace sync_debug_internal

void WarnOrErrorOnSyncSlow(std::string_view what) {
  // CUDA's wording ("called a synchronizing CUDA operation"), then what
  // waited and how to turn the check off.
  const int current = sync_debug_internal::mode.load(std::memory_order_relaxed);
  TORCH_CHECK(current != static_cast<int>(SyncDebugMode::kError),
              "called a synchronizing openreg operation: ", what,
              " waits for the daemon (torch.openreg.set_sync_debug_mode is "
              "\"error\"; \"default\" turns the check off)");
  if (current == static_cast<int>(SyncDebugMode::kWarn)) {
    TORCH_WARN("called a synchronizing openreg operation: ", what,
               " waits for the daemon (torch.openreg.set_sync_debug_mode is "
               "\"warn\"; \"default\" turns the check off)");
  }
}

void SetSyncDebugMode(SyncDebugMode mode) {
  sync_debug_internal::mode.store(static_cast<int>(mode),
                                  std::memory_order_relaxed);
}

SyncDebugMode GetSyncDebugMode() {
  return static_cast<SyncDebugMode>(
      sync_debug_internal::mode.load(std::memory_order_relaxed));
}

}  // namespace openreg::torch_backend
