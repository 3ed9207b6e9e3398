// Admission of kernels to one emulated device. A device has a fixed number
// of execution slots (its "multiprocessors"); every stream of every session
// on that device must hold one while its kernel runs. When slots are short,
// waiting kernels are admitted by stream priority (lower value first, as on
// CUDA) and, within one priority, in arrival order, so equal-priority
// streams take turns kernel by kernel. Only kernels pass the gate: copies,
// events, waits and frees do not compete for compute (and a stream blocked
// in a cross-stream wait must never hold a slot that the awaited stream
// needs).
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_GATE_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_GATE_H_

#include <atomic>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/stream_priority.h"

namespace openreg::daemon {

class ExecutionGate {
 public:
  explicit ExecutionGate(int slots);
  ExecutionGate(const ExecutionGate&) = delete;
  ExecutionGate& operator=(const ExecutionGate&) = delete;

  // Blocks until the caller may run a kernel; false (without a slot) when
  // `*stop` became true first. A true result must be paired with Release().
  bool Acquire(int priority, const std::atomic<bool>* stop);
  void Release();
  // Makes waiters re-check their stop flags; call after setting one.
  void Wake();

  int slots() const { return slots_; }
  // Kernels admitted so far and kernels waiting now (for tests and
  // statistics).
  uint64_t admitted() const;
  int waiting() const;

 private:
  // (priority, arrival ticket): std::set keeps the next kernel to admit
  // first.
  using Waiter = std::pair<int, uint64_t>;

  const int slots_;
  mutable absl::Mutex mutex_;
  int in_use_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mutex_) = 0;
  std::set<Waiter> waiting_ ABSL_GUARDED_BY(mutex_);
};

// Holds a slot for its scope when constructed with a gate; a null gate
// (no admission control) holds nothing.
class ExecutionSlot {
 public:
  ExecutionSlot(ExecutionGate* gate, int priority,
                const std::atomic<bool>* stop)
      : gate_(gate), held_(gate != nullptr && gate->Acquire(priority, stop)) {}
  ExecutionSlot(const ExecutionSlot&) = delete;
  ExecutionSlot& operator=(const ExecutionSlot&) = delete;
  ~ExecutionSlot() {
    if (held_) gate_->Release();
  }
  // False only when a stop request ended the wait.
  bool ok() const { return gate_ == nullptr || held_; }

 private:
  ExecutionGate* const gate_;
  const bool held_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_GATE_H_
