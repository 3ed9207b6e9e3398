// Runs Collective ring commands (the occl c10d backend's collectives) over
// the device memory of every rank of a communicator, inside the daemon.
//
// Each rank's stream pins what its part reads and writes in its own
// session and arrives at the communicator's rendezvous; the last to arrive
// runs the collective once, over every rank's memory, in one pass.
//
// The reduction order (docs/DISTRIBUTED.md): element by element, the
// result is ((p0 op p1) op p2) ... op p(n-1), with pr rank r's value, each
// step rounded to the dtype as ATen's kernel for that op does (add, mul,
// minimum, maximum; PREMUL_SUM: p0 x s, then acc + s x pr; AVG: the sum,
// then divided by n). It depends neither on which rank arrived last nor on
// thread counts, so results are bitwise reproducible.
#ifndef OPENREG_DEVICE_DAEMON_COLLECTIVES_COLLECTIVE_ENGINE_H_
#define OPENREG_DEVICE_DAEMON_COLLECTIVES_COLLECTIVE_ENGINE_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "device_daemon/collectives/communicators.h"
#include "device_daemon/execution/collective_runner.h"

namespace openreg::daemon {

class CollectiveEngine : public CollectiveRunner {
 public:
  // `communicators` must outlive the engine.
  explicit CollectiveEngine(Communicators* communicators)
      : communicators_(communicators) {}

  absl::Status Run(const StreamContext& context,
                   const proto::Collective& collective) override;
  absl::StatusOr<CollectiveView> View(
      const StreamContext& context,
      const proto::Collective& collective) override;
  void SessionClosed(uint64_t session_id) override;

 private:
  // The first timeout of `communicator` writes the flight recorder's
  // traces of the job of `pid` (rank `rank`'s process), when that rank
  // asked for them (FlightRecorderIdentity.dump_prefix).
  void DumpOnTimeout(Communicator& communicator, int rank, pid_t pid);

  Communicators* const communicators_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_COLLECTIVES_COLLECTIVE_ENGINE_H_
