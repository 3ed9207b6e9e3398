// A monotonically increasing 64-bit counter in shared memory that one
// process advances and other processes wait on: spin briefly, then sleep on
// a futex. Waking costs a syscall only when somebody sleeps for a value the
// advance reaches: sleepers publish the lowest value they wait for
// (`wake_at`), so a client synchronizing on the last of 50 queued commands
// is woken once, not at each of them.
#ifndef OPENREG_DATA_PLANE_WAITABLE_COUNTER_H_
#define OPENREG_DATA_PLANE_WAITABLE_COUNTER_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "data_plane/spin_wait.h"

namespace openreg {

// Lives in shared memory: trivially constructible, zero-initialized by the
// segment's creator, no pointers.
struct alignas(64) WaitableCounter {
  std::atomic<uint64_t> value;
  std::atomic<uint32_t> futex_word;  // bumped on an advance with sleepers
  std::atomic<uint32_t> sleepers;
  // The lowest value a sleeper waits for; 0 (as created) when none. An
  // advance that reaches it resets it to 0 and wakes every sleeper; those
  // still short of their value publish it again before sleeping.
  std::atomic<uint64_t> wake_at;

  uint64_t Load() const { return value.load(std::memory_order_acquire); }

  // Publishes `new_value` (>= the current value) and wakes sleepers.
  void Advance(uint64_t new_value);

  // Waits until value >= target or `timeout` passes; WakeAll() also ends
  // the wait. Returns whether the target was reached. Spins for `spin`
  // first (0 to sleep at once).
  bool WaitForAtLeast(uint64_t target, absl::Duration timeout,
                      absl::Duration spin = kSpinBeforeSleep);

  // Waits until value != observed or `timeout` passes.
  bool WaitForChange(uint64_t observed, absl::Duration timeout,
                     absl::Duration spin = kSpinBeforeSleep);

  // Wakes sleepers without changing the value (used to stop waiters).
  void WakeAll();
};

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory counters must be lock-free");

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_WAITABLE_COUNTER_H_
