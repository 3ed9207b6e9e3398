#include "device_daemon/execution_gate.h"

#include <algorithm>

namespace openreg::daemon {

ExecutionGate::ExecutionGate(int slots) : slots_(std::max(1, slots)) {}

bool ExecutionGate::Acquire(int priority, const std::atomic<bool>* stop) {
  absl::MutexLock lock(&mutex_);
  const Waiter self{ClampStreamPriority(priority), next_ticket_++};
  waiting_.insert(self);
  // Admitted when a slot is free and nobody ahead in (priority, arrival)
  // order waits; absl re-evaluates this on every unlock of mutex_.
  const auto admissible = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return stop->load(std::memory_order_acquire) ||
           (in_use_ < slots_ && *waiting_.begin() == self);
  };
  mutex_.Await(absl::Condition(&admissible));
  waiting_.erase(self);
  if (stop->load(std::memory_order_acquire)) return false;
  ++in_use_;
  ++admitted_;
  return true;
}

void ExecutionGate::Release() {
  absl::MutexLock lock(&mutex_);
  --in_use_;
}

void ExecutionGate::Wake() {
  // Unlocking re-evaluates the waiters' conditions, which read the flags.
  absl::MutexLock lock(&mutex_);
}

uint64_t ExecutionGate::admitted() const {
  absl::MutexLock lock(&mutex_);
  return admitted_;
}

int ExecutionGate::waiting() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(waiting_.size());
}

}  // namespace openreg::daemon
