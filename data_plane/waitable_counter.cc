#include "data_plane/waitable_counter.h"

#include <sched.h>

#include "absl/time/clock.h"
#include "data_plane/futex.h"
#include "data_plane/spin_wait.h"

namespace openreg {
namespace {

// wake_at when no sleeper has published a target (as zero-filled memory
// is created). Targets are >= 1: a wait for 0 is done before it sleeps.
constexpr uint64_t kNobodyWaits = 0;

// Lowers counter->wake_at to `target` unless a lower target is published.
void PublishTarget(WaitableCounter* counter, uint64_t target) {
  uint64_t current = counter->wake_at.load(std::memory_order_seq_cst);
  while ((current == kNobodyWaits || target < current) &&
         !counter->wake_at.compare_exchange_weak(current, target,
                                                 std::memory_order_seq_cst)) {
  }
}

// Whether wake_at still covers a sleeper waiting for `target`.
bool TargetPublished(const WaitableCounter* counter, uint64_t target) {
  const uint64_t current = counter->wake_at.load(std::memory_order_seq_cst);
  return current != kNobodyWaits && current <= target;
}

// Waits until `done()` holds; `target` is the lowest value that can make it
// hold. Spins, then sleeps on the counter's futex word. The sleeper count
// and the word follow the event-count pattern: register as a sleeper and
// publish the target, read the word, re-check the condition, then sleep on
// the word. An advance resets wake_at before it bumps the word, so a target
// found erased after the word was read is published again first.
template <typename Done>
bool WaitUntil(WaitableCounter* counter, uint64_t target, Done done,
               absl::Duration timeout, absl::Duration spin) {
  if (done()) return true;
  const absl::Time start = absl::Now();
  const absl::Time spin_until = start + spin;
  while (absl::Now() < spin_until) {
    SpinPause();
    if (done()) return true;
  }
  const absl::Time deadline = start + timeout;
  while (true) {
    counter->sleepers.fetch_add(1, std::memory_order_seq_cst);
    PublishTarget(counter, target);
    const uint32_t word = counter->futex_word.load(std::memory_order_seq_cst);
    if (!TargetPublished(counter, target)) {
      // An advance reset it meanwhile: publish again.
      counter->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      continue;
    }
    const uint64_t value_before = counter->Load();
    if (done()) {
      counter->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return true;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      counter->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return false;
    }
    FutexWait(&counter->futex_word, word, left);
    counter->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done()) return true;
    // A wake without progress (WakeAll) ends the wait early so that a
    // waiter can notice a stop request; callers wait in loops.
    if (counter->futex_word.load(std::memory_order_seq_cst) != word &&
        counter->Load() == value_before) {
      return false;
    }
  }
}

}  // namespace

void WaitableCounter::Advance(uint64_t new_value) {
  value.store(new_value, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) == 0) return;
  const uint64_t target = wake_at.load(std::memory_order_seq_cst);
  if (target != kNobodyWaits && new_value >= target) {
    wake_at.store(kNobodyWaits, std::memory_order_seq_cst);
    WakeAll();
  }
}

void WaitableCounter::WakeAll() {
  futex_word.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&futex_word);
}

bool WaitableCounter::WaitForAtLeast(uint64_t target, absl::Duration timeout,
                                     absl::Duration spin) {
  return WaitUntil(
      this, target, [&] { return Load() >= target; }, timeout, spin);
}

bool WaitableCounter::WaitForChange(uint64_t observed, absl::Duration timeout,
                                    absl::Duration spin) {
  // Values only grow, so the next change reaches observed + 1.
  return WaitUntil(
      this, observed + 1, [&] { return Load() != observed; }, timeout, spin);
}

}  // namespace openreg
