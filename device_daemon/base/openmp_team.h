// The OpenMP team of an executor thread (libgomp: ATen's and MKL's
// intra-op threads).
//
// libgomp gives every thread that opens a parallel region a team of
// workers for the thread's lifetime, and once it manages more threads than
// the host has cores it stops their spinning between regions: every region
// then pays futex wakes. Each executor that ran a multi-threaded kernel
// holds a team, so a daemon that had served a few clients ran 2-thread
// kernels up to 5x slower than a fresh one (docs/ARCHITECTURE.md, "The
// cost of one op"). An executor idle for a while hands its team back, so
// that the daemon returns to a fresh one's speed once its executors idle.
#ifndef OPENREG_DEVICE_DAEMON_BASE_OPENMP_TEAM_H_
#define OPENREG_DEVICE_DAEMON_BASE_OPENMP_TEAM_H_

namespace openreg::daemon {

// Frees the calling thread's OpenMP team, if it has one (a no-op
// otherwise, or without libgomp). Its workers exit; the thread's next
// parallel region starts a new team (a thread start, tens of microseconds).
void ReleaseOpenMpTeam();

// How many times the calling thread has released its team: a team's
// worker threads are the same ones while this stays the same
// (base/openmp_worker_placement.h caches them).
unsigned OpenMpTeamReleases();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_OPENMP_TEAM_H_
