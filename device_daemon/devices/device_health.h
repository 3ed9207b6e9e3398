// The health of one emulated device: usable, or in a FAULT or lost state
// after an injected fault (docs/FAULT_INJECTION.md). While not usable,
// every command and allocation on the device fails, for every session
// (as MPS clients of a faulted server do), until Devices::Reset().
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_HEALTH_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_HEALTH_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace openreg::daemon {

enum class DeviceState : uint32_t { kOk = 0, kFault = 1, kLost = 2 };

// "ok", "fault", "lost" (as statistics report it).
const char* DeviceStateName(DeviceState state);

class DeviceHealth {
 public:
  explicit DeviceHealth(int device) : device_(device) {}

  // One relaxed load: the per-command fast path.
  bool usable() const {
    return state_.load(std::memory_order_acquire) ==
           static_cast<uint32_t>(DeviceState::kOk);
  }
  DeviceState state() const {
    return static_cast<DeviceState>(state_.load(std::memory_order_acquire));
  }
  // OK while usable; otherwise DEVICE_FAULT or DEVICE_LOST naming the
  // device, its cause and how to recover.
  absl::Status Check() const;
  // Enters kFault or kLost because of `cause` (kept for error messages).
  // A device already out of service keeps its first cause.
  void Enter(DeviceState state, std::string cause);
  // Back to kOk (Devices::Reset also discards the device's memory).
  void Reset();

 private:
  const int device_;
  std::atomic<uint32_t> state_{static_cast<uint32_t>(DeviceState::kOk)};
  mutable absl::Mutex mutex_;
  std::string cause_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_HEALTH_H_
