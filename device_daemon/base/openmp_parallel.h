// A parallel region of libtorch's OpenMP runtime (libgomp), opened from the
// daemon's code, which is built without -fopenmp.
//
// libtorch brings libgomp into the daemon, and the daemon links no OpenMP
// runtime of its own (openmp_team.h). ATen's at::parallel_for is a header
// template whose parallel branch exists only where the including file is
// compiled with -fopenmp: in the daemon's code it always runs inline. This
// calls libgomp's entry point for `#pragma omp parallel num_threads(n)`
// (GOMP_parallel(fn, data, n, 0), its ABI since GCC 4.9), looked up at run
// time, so a region here is one of the calling thread's team, as a
// kernel's own regions are.
//
// Contract:
//  - body(thread, team_size) runs once on each thread of a team of
//    `threads` (libgomp may give fewer; team_size is what it gave), the
//    calling thread being thread 0, and RunOnOpenMpTeam returns once every
//    call has returned.
//  - With threads <= 1, inside another parallel region, or where libgomp
//    is not loaded, body(0, 1) runs on the calling thread.
//  - An exception thrown by body on any thread is rethrown on the calling
//    thread (the first one thrown); the other calls still run to the end.
//  - Inside body, ATen's parallel_for (and every kernel's) runs inline:
//    one thread each. Thread-local state (InferenceMode, the intra-op
//    count, warning handlers) is the team threads' own, not the caller's.
#ifndef OPENREG_DEVICE_DAEMON_BASE_OPENMP_PARALLEL_H_
#define OPENREG_DEVICE_DAEMON_BASE_OPENMP_PARALLEL_H_

#include "absl/functional/function_ref.h"

namespace openreg::daemon {

void RunOnOpenMpTeam(int threads,
                     absl::FunctionRef<void(int thread, int team_size)> body);

// Whether libgomp is loaded, so that RunOnOpenMpTeam can open a region.
bool OpenMpLoaded();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_OPENMP_PARALLEL_H_
