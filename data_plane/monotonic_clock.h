// The clock of every timestamp the daemon and its clients exchange (event
// records, profiler timelines) and of the daemon's cost profile:
// CLOCK_MONOTONIC, which both processes read alike on one host (vDSO, no
// system call, ~20 ns).
#ifndef OPENREG_DATA_PLANE_MONOTONIC_CLOCK_H_
#define OPENREG_DATA_PLANE_MONOTONIC_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace openreg {

inline int64_t MonotonicNanoseconds() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_MONOTONIC_CLOCK_H_
