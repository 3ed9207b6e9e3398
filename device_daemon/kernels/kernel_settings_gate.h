// Runs each kernel with the ATen settings its launch carried
// (op_codec/kernel_settings.h). Those settings are process-wide in the
// daemon, and kernels of many sessions run at once, so a kernel may run
// only while the process holds exactly its settings: kernels with the
// current settings run together; a kernel with other settings waits until
// the running ones have finished, then switches the process over. Waiters
// whose settings differ from the current ones are served in arrival order,
// and while one waits, newcomers with the current settings wait behind it,
// so no setting starves. With every client on ATen's defaults, admission
// is one uncontended mutex.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_SETTINGS_GATE_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_SETTINGS_GATE_H_

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "op_codec/kernel_settings.h"

namespace openreg::daemon {

class KernelSettingsGate {
 public:
  // Starts from ATen's defaults, whatever the daemon's own environment
  // set: every kernel runs with the defaults plus its client's changes.
  KernelSettingsGate();
  KernelSettingsGate(const KernelSettingsGate&) = delete;
  KernelSettingsGate& operator=(const KernelSettingsGate&) = delete;

  // Held while one kernel runs with `settings`.
  class Pass {
   public:
    explicit Pass(KernelSettingsGate* gate) : gate_(gate) {}
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() { gate_->Leave(); }

   private:
    KernelSettingsGate* gate_;
  };

  // Blocks until the process runs with `settings` (switching it when no
  // kernel runs), then lets the caller's kernel run until the Pass ends.
  // The caller applies the per-thread part (ApplyThreadSettings) itself.
  Pass Enter(const op_codec::KernelSettings& settings);

  // For tests: how many times the process's settings were switched, and
  // how many kernels wait.
  uint64_t switches() const;
  size_t waiters() const;

 private:
  void Leave();
  // The oldest waiter whose settings differ from the current ones, or 0.
  uint64_t FirstDifferentWaiter() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  op_codec::KernelSettings current_ ABSL_GUARDED_BY(mutex_);
  int running_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, op_codec::KernelSettings> waiting_ ABSL_GUARDED_BY(mutex_);
  uint64_t switches_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_SETTINGS_GATE_H_
