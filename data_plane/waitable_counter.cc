#include "data_plane/waitable_counter.h"

#include <sched.h>

#include "absl/time/clock.h"
#include "data_plane/futex.h"

namespace openreg {
namespace {

inline void CpuRelax() { __builtin_ia32_pause(); }

// Waits until `done()` holds. Spins, then sleeps on the counter's futex word.
// The sleeper count and the word follow the event-count pattern: register as
// a sleeper, read the word, re-check the condition, then sleep on the word.
template <typename Done>
bool WaitUntil(WaitableCounter* counter, Done done, absl::Duration timeout,
               absl::Duration spin) {
  if (done()) return true;
  const absl::Time start = absl::Now();
  const absl::Time spin_until = start + spin;
  while (absl::Now() < spin_until) {
    for (int i = 0; i < 64; ++i) CpuRelax();
    if (done()) return true;
  }
  const absl::Time deadline = start + timeout;
  while (true) {
    counter->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t word = counter->futex_word.load(std::memory_order_seq_cst);
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
  if (sleepers.load(std::memory_order_seq_cst) != 0) WakeAll();
}

void WaitableCounter::WakeAll() {
  futex_word.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&futex_word);
}

bool WaitableCounter::WaitForAtLeast(uint64_t target, absl::Duration timeout,
                                     absl::Duration spin) {
  return WaitUntil(
      this, [&] { return Load() >= target; }, timeout, spin);
}

bool WaitableCounter::WaitForChange(uint64_t observed, absl::Duration timeout,
                                    absl::Duration spin) {
  return WaitUntil(
      this, [&] { return Load() != observed; }, timeout, spin);
}

}  // namespace openreg
