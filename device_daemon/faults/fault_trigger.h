// When an armed fault fires: its filters (device, session, stream, kind,
// op, phase, output count) and its counting rule (nth / after / every,
// probability, time window, how many times) over the commands that match.
// Every random draw comes from FiringRng(seed, match), so the same plan,
// seed and program fire at the same command on every run.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_FAULT_TRIGGER_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_FAULT_TRIGGER_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device_daemon/faults/command_facts.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

// A deterministic generator for the `match`th match of a fault seeded
// with `seed`; `salt` separates independent draws of one firing.
std::mt19937_64 FiringRng(uint64_t seed, uint64_t match, uint64_t salt);

class FaultTrigger {
 public:
  // `spec` was validated (data_plane/fault_plan.h); `armed_at` starts
  // the time window; `session_id` != 0 scopes the fault to that session.
  FaultTrigger(const proto::FaultSpec& spec, uint64_t session_id,
               absl::Time armed_at);

  // Counts `facts` if it matches the filters and returns the match's index
  // (1-based) when the fault fires on it.
  std::optional<uint64_t> Evaluate(const CommandFacts& facts);

  uint64_t matches() const;
  uint64_t fired() const;
  uint64_t session_id() const { return session_id_; }

 private:
  bool Matches(const CommandFacts& facts) const;
  bool OpMatches(absl::string_view name, absl::string_view overload) const;
  bool GlobMatches(absl::string_view name, absl::string_view overload) const;

  const proto::Trigger trigger_;
  const uint64_t seed_;
  const uint64_t session_id_;
  const absl::Time armed_at_;
  const proto::CommandKind kind_;  // ANY = every kind
  const std::string op_;           // faults::EffectiveOp
  const int phase_;                // -1 = any
  const bool op_is_glob_;
  const uint32_t times_;  // 0 = always

  // Glob results by "name.overload": fnmatch per command would cost more
  // than the command itself for small ops.
  mutable absl::Mutex glob_mutex_;
  mutable absl::flat_hash_map<std::string, bool> glob_results_
      ABSL_GUARDED_BY(glob_mutex_);

  mutable absl::Mutex mutex_;
  uint64_t matches_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t fired_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_FAULT_TRIGGER_H_
