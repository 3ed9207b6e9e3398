// The dynamic profile of device commands (openreg-daemon
// --profile_commands): how many times each (device, kind, op, phase) ran.
// A fault campaign's golden run samples its fault sites from it.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_PROFILE_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_PROFILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/faults/command_facts.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

class CommandProfile {
 public:
  void Count(const CommandFacts& facts);
  std::vector<proto::CommandCount> Snapshot() const;

 private:
  // device, kind, "name.overload", phase.
  using Key = std::tuple<int, int, std::string, int>;
  mutable absl::Mutex mutex_;
  std::map<Key, uint64_t> counts_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_PROFILE_H_
