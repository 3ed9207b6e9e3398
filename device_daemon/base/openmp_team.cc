#include "device_daemon/base/openmp_team.h"

#include <dlfcn.h>

namespace openreg::daemon {

namespace {
thread_local unsigned t_team_releases = 0;
}  // namespace

unsigned OpenMpTeamReleases() { return t_team_releases; }

void ReleaseOpenMpTeam() {
  ++t_team_releases;
  // Looked up rather than linked: base/ does not link libgomp (libtorch
  // brings it into the daemon). omp_pause_soft = 1 (OpenMP 5.0).
  using PauseResourceAll = int (*)(int);
  static const auto pause_all = reinterpret_cast<PauseResourceAll>(
      dlsym(RTLD_DEFAULT, "omp_pause_resource_all"));
  constexpr int kPauseSoft = 1;
  if (pause_all != nullptr) pause_all(kPauseSoft);
}

}  // namespace openreg::daemon
