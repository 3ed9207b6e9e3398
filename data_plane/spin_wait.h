// Spinning before sleeping, the same way on both sides: a waiter (a client
// synchronizing on a stream, an executor waiting on another stream, a stream
// worker whose ring ran empty) first re-checks its condition for
// kSpinBeforeSleep, pausing with SpinPause() between checks, and only then
// sleeps (a futex wait) or parks. Whether to spin at all is the caller's
// call (doorbell.h, DeviceScheduler::WaitSpin: not while the cores are
// oversubscribed).
#ifndef OPENREG_DATA_PLANE_SPIN_WAIT_H_
#define OPENREG_DATA_PLANE_SPIN_WAIT_H_

#include "absl/time/time.h"

namespace openreg {

// About the time a small command takes, and the gap between two launches
// of a busy client: a wait that short is over before a futex sleep and
// wake-up (a syscall on each side and a context switch) would be.
inline constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(20);

// Between two checks of a spinning wait. The pause instruction tells the
// core this is a spin loop (yielding to its hyperthread sibling); 64 of
// them space the checks so that the watched cache line is not pulled away
// from the writer at every iteration.
inline void SpinPause() {
  for (int i = 0; i < 64; ++i) __builtin_ia32_pause();
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SPIN_WAIT_H_
