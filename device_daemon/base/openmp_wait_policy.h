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
// to 1.43-1.63x. So spinning stays the default and sleeping is a choice.
//
// libgomp reads its policy once, when it loads, before main: to make its
// workers sleep the daemon re-executes itself with OMP_WAIT_POLICY=PASSIVE
// (and without GOMP_SPINCOUNT, which would override it). The process keeps
// its pid, arguments and open files.
#ifndef OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_
#define OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_

namespace openreg::daemon {

// Returns when the environment already makes libgomp's workers sleep
// (OMP_WAIT_POLICY=PASSIVE, no GOMP_SPINCOUNT), or when the re-execution
// failed (said on stderr; the workers then spin). Call before the daemon
// starts anything.
void MakeOpenMpWorkersSleep(char** argv);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_OPENMP_WAIT_POLICY_H_
