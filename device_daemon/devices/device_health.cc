#include "device_daemon/devices/device_health.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

const char* DeviceStateName(DeviceState state) {
  switch (state) {
    case DeviceState::kOk:
      return "ok";
    case DeviceState::kFault:
      return "fault";
    case DeviceState::kLost:
      return "lost";
  }
  return "unknown";
}

absl::Status DeviceHealth::Check() const {
  const DeviceState current = state();
  if (current == DeviceState::kOk) return absl::OkStatus();
  std::string cause;
  {
    absl::MutexLock lock(&mutex_);
    cause = cause_;
  }
  const std::string recovery =
      absl::StrCat("; reset it with `openreg-ctl device reset ", device_,
                   "` or torch.openreg.faults.reset_device(", device_,
                   ") (memory held on it is lost)");
  if (current == DeviceState::kLost) {
    return MakeError(
        proto::DEVICE_LOST,
        absl::StrCat("openreg:", device_, " was lost (", cause, ")", recovery));
  }
  return MakeError(proto::DEVICE_FAULT,
                   absl::StrCat("openreg:", device_, " is in the FAULT state (",
                                cause, ")", recovery));
}

void DeviceHealth::Enter(DeviceState state, std::string cause) {
  absl::MutexLock lock(&mutex_);
  if (!usable()) return;
  cause_ = std::move(cause);
  state_.store(static_cast<uint32_t>(state), std::memory_order_release);
}

void DeviceHealth::Reset() {
  absl::MutexLock lock(&mutex_);
  cause_.clear();
  state_.store(static_cast<uint32_t>(DeviceState::kOk),
               std::memory_order_release);
}

}  // namespace openreg::daemon
