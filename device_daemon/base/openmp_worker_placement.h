// Where an executor and its OpenMP workers run while it runs kernels: the
// executor held on one CPU, its workers kept off that CPU (openreg-daemon
// --openmp_hold_cpu; off by default, see HoldExecutorsOnTheirCpus).
//
// Why: libgomp's workers spin for some milliseconds after a region, then
// sleep on a futex, and a region that has to wake them found executor and
// worker sharing a CPU while the other idled, the executor spinning at the
// region's barrier: on a 2-vCPU VM the first 2-thread `addmm` after the
// client idled 20 ms took 4-12 ms against 0.3 ms on CPU eager
// (docs/ARCHITECTURE.md, "The cost of one op"). CPU eager shows the same
// after 150 ms of idling, and not with OMP_PROC_BIND=spread (each thread
// bound to a core of its own). The daemon cannot bind that way: libgomp
// binds the initial thread, and every thread the daemon starts would
// inherit its single core. Keeping only the workers off the executor's CPU
// did not help (3.8 ms), nor holding the executor only while it ran
// kernels (3.5-3.9 ms); holding it on its CPU for as long as it has its
// team did (0.3 ms). So an executor about to run a multi-threaded kernel
// holds itself on the CPU it is on and moves its workers off it, and lets
// itself run anywhere again when it hands its team back (idle for 100 ms,
// base/openmp_team.h). Nothing else changes: the same workers, the same
// split of the work, the same bits.
#ifndef OPENREG_DEVICE_DAEMON_BASE_OPENMP_WORKER_PLACEMENT_H_
#define OPENREG_DEVICE_DAEMON_BASE_OPENMP_WORKER_PLACEMENT_H_

namespace openreg::daemon {

// Turns the placement below on (openreg-daemon --openmp_hold_cpu; off by
// default: with kernels on several streams or devices at once, executors
// held on their CPUs ran 10-15% slower). Called once, before executors
// start.
void HoldExecutorsOnTheirCpus(bool hold);

// Before a kernel that runs `threads` intra-op threads on the calling
// thread's team (after the thread's count is set): holds the calling thread
// on its current CPU and its team's workers off it. A syscall when the
// caller was not held yet, one per worker more when it is on another CPU
// than at its last such kernel. Does nothing for one thread, on a
// single-CPU host, or where affinity cannot be set.
void KeepOpenMpWorkersOffThisCpu(int threads);

// The calling executor handed its team back: it may run on every CPU
// again.
void LetThisThreadRunAnywhere();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_OPENMP_WORKER_PLACEMENT_H_
