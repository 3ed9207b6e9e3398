// Process-shared futex wait/wake on a 32-bit word in shared memory.
//
// Written by hand because no library offers a cross-process futex: the
// words live in a MAP_SHARED segment mapped by the daemon and a client, so
// the non-private FUTEX_WAIT/FUTEX_WAKE operations are required.
#ifndef OPENREG_DATA_PLANE_FUTEX_H_
#define OPENREG_DATA_PLANE_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace openreg {

// Sleeps while *word == expected, at most `timeout`. Returns early on a wake,
// a signal or a spurious wake-up; callers re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout);

// Wakes every waiter sleeping on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

// Wakes at most one waiter sleeping on `word`.
void FutexWakeOne(std::atomic<uint32_t>* word);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_FUTEX_H_
