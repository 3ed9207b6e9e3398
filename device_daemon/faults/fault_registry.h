// The armed faults of the daemon: arming (validated plans only), disarming
// by id or owner, listing, forgetting a session's faults when it ends, and
// evaluating every trigger on a command's facts.
//
// Thread model: Evaluate runs on executor threads for every command while
// faults are armed, the rest on gRPC threads; arming is rare and matching
// frequent, so faults are read under a reader lock.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_FAULT_REGISTRY_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_FAULT_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/faults/armed_fault.h"
#include "device_daemon/faults/command_facts.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

class FaultRegistry {
 public:
  // Arms every fault of `plan` (already validated) for `session_id` (0: an
  // operator). A fault that is not daemon-wide is scoped to the arming
  // session. Returns the new ids, in plan order.
  std::vector<uint32_t> Arm(const proto::FaultPlan& plan, uint64_t session_id);

  // Disarms `ids` (every fault when empty). With `session_id` != 0 only
  // that session's faults can be named (and "all" means all of its own).
  // INVALID_HANDLE names an id that is not armed (or not the session's);
  // nothing is disarmed then.
  absl::StatusOr<uint32_t> Disarm(const std::vector<uint32_t>& ids,
                                  uint64_t session_id);

  // The session ended: the faults it armed or that are scoped to it go.
  void ForgetSession(uint64_t session_id);

  std::vector<proto::ArmedFault> List() const;
  bool empty() const;

  // The faults whose trigger fires on `facts` (each trigger counts the
  // match).
  std::vector<Firing> Evaluate(const CommandFacts& facts) const;

 private:
  mutable absl::Mutex mutex_;
  std::vector<std::shared_ptr<ArmedFault>> faults_ ABSL_GUARDED_BY(mutex_);
  uint32_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_FAULT_REGISTRY_H_
