#include "device_daemon/faults/command_profile.h"

namespace openreg::daemon {

void CommandProfile::Count(const CommandFacts& facts) {
  std::string op = CommandLabel(facts);
  absl::MutexLock lock(&mutex_);
  ++counts_[Key{facts.device, facts.kind, std::move(op), facts.phase}];
}

std::vector<proto::CommandCount> CommandProfile::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  std::vector<proto::CommandCount> counts;
  counts.reserve(counts_.size());
  for (const auto& [key, count] : counts_) {
    proto::CommandCount& entry = counts.emplace_back();
    entry.set_device(std::get<0>(key));
    entry.set_kind(static_cast<proto::CommandKind>(std::get<1>(key)));
    entry.set_op(std::get<2>(key));
    entry.set_phase(static_cast<proto::CommandPhase>(std::get<3>(key)));
    entry.set_count(count);
  }
  return counts;
}

}  // namespace openreg::daemon
