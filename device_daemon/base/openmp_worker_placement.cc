#include "device_daemon/base/openmp_worker_placement.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "device_daemon/base/openmp_parallel.h"
#include "device_daemon/base/openmp_team.h"

namespace openreg::daemon {
namespace {

// The CPUs the daemon may run on, as it started.
const cpu_set_t& ProcessCpus() {
  static const cpu_set_t cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_ZERO(&set);
    return set;
  }();
  return cpus;
}

// What the calling executor knows of its team.
struct TeamPlacement {
  int threads = 0;             // the team size the workers were found for
  unsigned releases = 0;       // OpenMpTeamReleases() when they were found
  std::vector<pid_t> workers;  // thread ids, the executor itself excluded
  int excluded_cpu = -1;       // the CPU the workers are kept off
  bool pinned = false;         // the executor itself is held on it
};

thread_local TeamPlacement t_placement;

std::atomic<bool> g_hold{false};

// Runs one empty region of `threads` threads (libgomp hands a team's
// slots to the same pool threads at every region of that size) and
// returns the workers' thread ids.
std::vector<pid_t> FindWorkers(int threads) {
  std::vector<std::atomic<pid_t>> ids(threads);
  RunOnOpenMpTeam(threads, [&ids](int thread, int /*team_size*/) {
    if (thread >= 0 && thread < static_cast<int>(ids.size())) {
      ids[thread].store(static_cast<pid_t>(syscall(SYS_gettid)),
                        std::memory_order_relaxed);
    }
  });
  std::vector<pid_t> workers;
  for (size_t slot = 1; slot < ids.size(); ++slot) {
    const pid_t id = ids[slot].load(std::memory_order_relaxed);
    if (id != 0) workers.push_back(id);
  }
  return workers;
}

}  // namespace

void HoldExecutorsOnTheirCpus(bool hold) {
  g_hold.store(hold, std::memory_order_relaxed);
}

void KeepOpenMpWorkersOffThisCpu(int threads) {
  if (threads <= 1 || !g_hold.load(std::memory_order_relaxed) ||
      CPU_COUNT(&ProcessCpus()) < 2 || !OpenMpLoaded()) {
    return;
  }
  TeamPlacement& placement = t_placement;
  const unsigned releases = OpenMpTeamReleases();
  if (placement.threads != threads || placement.releases != releases) {
    // New workers inherit the executor's affinity: let it be every CPU.
    LetThisThreadRunAnywhere();
    placement.workers = FindWorkers(threads);
    placement.threads = threads;
    placement.releases = releases;
    placement.excluded_cpu = -1;  // new threads start with every CPU
  }
  const int cpu = sched_getcpu();
  if (cpu < 0 || !CPU_ISSET(cpu, &ProcessCpus())) return;
  if (cpu != placement.excluded_cpu) {
    cpu_set_t others = ProcessCpus();
    CPU_CLR(cpu, &others);
    for (pid_t worker : placement.workers) {
      if (sched_setaffinity(worker, sizeof(others), &others) != 0) {
        // A worker that is gone (a team libgomp rebuilt): find them again
        // at the next kernel.
        placement.threads = 0;
        return;
      }
    }
    placement.excluded_cpu = cpu;
  }
  if (!placement.pinned) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    CPU_SET(cpu, &mine);
    placement.pinned = sched_setaffinity(0, sizeof(mine), &mine) == 0;
  }
}

void LetThisThreadRunAnywhere() {
  TeamPlacement& placement = t_placement;
  if (!placement.pinned) return;
  placement.pinned = false;
  sched_setaffinity(0, sizeof(cpu_set_t), &ProcessCpus());
}

}  // namespace openreg::daemon
