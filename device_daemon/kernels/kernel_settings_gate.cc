#include "device_daemon/kernels/kernel_settings_gate.h"

namespace openreg::daemon {

KernelSettingsGate::KernelSettingsGate() {
  op_codec::ApplyProcessSettings(current_);
}

uint64_t KernelSettingsGate::FirstDifferentWaiter() const {
  for (const auto& [ticket, settings] : waiting_) {
    if (!op_codec::SameProcessSettings(settings, current_)) return ticket;
  }
  return 0;
}

KernelSettingsGate::Pass KernelSettingsGate::Enter(
    const op_codec::KernelSettings& settings) {
  absl::MutexLock lock(&mutex_);
  if (waiting_.empty() &&
      op_codec::SameProcessSettings(settings, current_)) {  // the usual case
    ++running_;
    return Pass(this);
  }
  const uint64_t ticket = next_ticket_++;
  waiting_.emplace(ticket, settings);
  const auto admissible = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const uint64_t first_different = FirstDifferentWaiter();
    if (op_codec::SameProcessSettings(settings, current_)) {
      return first_different == 0 || ticket < first_different;
    }
    return running_ == 0 && ticket == first_different;
  };
  mutex_.Await(absl::Condition(&admissible));
  waiting_.erase(ticket);
  if (!op_codec::SameProcessSettings(settings, current_)) {
    op_codec::ApplyProcessSettings(settings);
    current_ = settings;
    ++switches_;
  }
  ++running_;
  return Pass(this);
}

void KernelSettingsGate::Leave() {
  absl::MutexLock lock(&mutex_);
  --running_;
}

size_t KernelSettingsGate::waiters() const {
  absl::MutexLock lock(&mutex_);
  return waiting_.size();
}

uint64_t KernelSettingsGate::switches() const {
  absl::MutexLock lock(&mutex_);
  return switches_;
}

}  // namespace openreg::daemon
