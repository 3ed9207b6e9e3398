#include "device_daemon/base/openmp_parallel.h"

#include <dlfcn.h>

#include <atomic>
#include <exception>

namespace openreg::daemon {
namespace {

// libgomp's entry points, looked up rather than linked (as in
// openmp_team.cc).
using ParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);
using IntFn = int (*)();

struct OpenMp {
  ParallelFn parallel = nullptr;
  IntFn thread_num = nullptr;
  IntFn num_threads = nullptr;
  IntFn in_parallel = nullptr;

  bool Loaded() const {
    return parallel != nullptr && thread_num != nullptr &&
           num_threads != nullptr && in_parallel != nullptr;
  }
};

const OpenMp& Gomp() {
  static const OpenMp gomp = [] {
    OpenMp found;
    found.parallel =
        reinterpret_cast<ParallelFn>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    found.thread_num =
        reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
    found.num_threads =
        reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
    found.in_parallel =
        reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_in_parallel"));
    return found;
  }();
  return gomp;
}

struct Region {
  absl::FunctionRef<void(int, int)> body;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
};

// Runs on every thread of the team; an exception must not leave it (it
// would unwind through libgomp's frames).
void RunRegion(void* data) {
  auto* region = static_cast<Region*>(data);
  try {
    region->body(Gomp().thread_num(), Gomp().num_threads());
  } catch (...) {
    if (!region->failed.test_and_set()) {
      region->error = std::current_exception();
    }
  }
}

}  // namespace

bool OpenMpLoaded() { return Gomp().Loaded(); }

void RunOnOpenMpTeam(int threads,
                     absl::FunctionRef<void(int thread, int team_size)> body) {
  const OpenMp& gomp = Gomp();
  if (threads <= 1 || !gomp.Loaded() || gomp.in_parallel() != 0) {
    body(0, 1);
    return;
  }
  Region region{body};
  gomp.parallel(&RunRegion, &region, static_cast<unsigned>(threads), 0);
  if (region.error) std::rethrow_exception(region.error);
}

}  // namespace openreg::daemon
