// How the daemon's OpenMP workers wait between parallel regions
// (openreg-daemon --openmp_wait).
//
// libgomp's workers spin after every parallel region (GOMP_SPINCOUNT
// iterations: 4-9 ms measured) before they sleep. That keeps the regions
// of one kernel, back to back, fast; but in the daemon the spin runs while
// its clients work. Measured on 2 cores (docs/ARCHITECTURE.md, "The cost
// of one op"): with sleeping workers (OMP_WAIT_POLICY=PASSIVE) a
// transformer step's daemon CPU fell from 36 to 20-21 us per command and a
// graph-replayed MLP step from 1.06-1.11x to 0.83x of CPU eager, while a
// CNN step, whose convolutions open many regions each, rose from 0.84-1.00x
// to 1.43-1.63x. A short spin (GOMP_SPINCOUNT=3000, tens of microseconds:
// a kernel's back-to-back regions still find their workers awake) cut the
// first 2-thread matrix product after 20 ms of idling from 3-16 ms to
// 0.8-0.9 ms and the daemon's CPU per training step by 10-30%, with step
// times within the machine's noise (2026-12-04). Timed as loops of 3 s of
// eager steps, alternating daemons (2026-12-07), a fifth of libgomp's
// count (60,000) ran the transformer step at 4.58-4.73 ms against
// 5.14-5.19 and the CNN step at 3.66-3.84 against 3.95-4.00 (in a later
// pair the CNN at 3.74-3.82 both); 3,000 slowed the CNN (4.18-4.35). So
// the default is that bounded spin, and libgomp's own, the short spin and
// sleeping are choices.
//
// libgomp reads its policy once, when it loads, before main: the daemon
// re-executes itself with the environment the choice needs. The process
// keeps its pid, arguments and open files.
#ifndef OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_
#define OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_

namespace openreg::daemon {

enum class OpenMpWait {
  // The default: GOMP_SPINCOUNT=kBoundedSpinCount, then sleep; an
  // environment that sets GOMP_SPINCOUNT or OMP_WAIT_POLICY keeps its own.
  kBoundedSpin,
  kSpin,       // libgomp's default (milliseconds)
  kShortSpin,  // GOMP_SPINCOUNT=kShortSpinCount, then sleep
  kSleep,      // OMP_WAIT_POLICY=PASSIVE, no GOMP_SPINCOUNT
};

// The spins of kBoundedSpin and kShortSpin, in libgomp's iterations
// (its own default is 300,000).
inline constexpr int kBoundedSpinCount = 60000;
inline constexpr int kShortSpinCount = 3000;

// Returns when the environment already gives `wait` (kSpin always does:
// the environment is left as it is; kBoundedSpin does when it names a
// spin count or a policy), or when the re-execution failed (said on
// stderr; the workers then wait as the environment says). Call before the
// daemon starts anything.
void SetOpenMpWait(OpenMpWait wait, char** argv);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_
