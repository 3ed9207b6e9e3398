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
// core this is a spin loop (yielding to its hyperthread sibling). Its cost
// varies by CPU from about 10 cycles (older Intel) to 140 (Skylake and
// later) and was 29 ns on this project's AMD EPYC VMs, so 64 of them (the
// count once used here) put 1.9 us between checks there, and the waiter
// noticed its condition 0.9 us late on average, on both sides of every
// round trip. 4 keep a check at most ~200 ns late on any of them; a
// watched line only read (never written) by the spinner stays in its cache
// until the writer's next store, so checking more often costs the writer
// nothing.
inline constexpr int kPausesBetweenChecks = 4;
inline void SpinPause() {
  for (int i = 0; i < kPausesBetweenChecks; ++i) __builtin_ia32_pause();
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SPIN_WAIT_H_
