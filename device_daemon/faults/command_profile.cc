#include "device_daemon/faults/command_profile.h"

#include "absl/strings/str_cat.h"
#include "fault_injection/fault_plan.h"

namespace openreg::daemon {

void CommandProfile::Count(const CommandFacts& facts) {
  std::string op = facts.overload.empty()
                       ? std::string(facts.name)
                       : absl::StrCat(facts.name, ".", facts.overload);
  absl::MutexLock lock(&mutex_);
  ++counts_[Key{facts.device, std::string(facts.kind), std::move(op),
                facts.phase}];
}

std::vector<proto::CommandCount> CommandProfile::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  std::vector<proto::CommandCount> counts;
  counts.reserve(counts_.size());
  for (const auto& [key, count] : counts_) {
    proto::CommandCount& entry = counts.emplace_back();
    entry.set_device(std::get<0>(key));
    entry.set_kind(std::get<1>(key));
    entry.set_op(std::get<2>(key));
    entry.set_phase(std::string(faults::PhaseName(std::get<3>(key))));
    entry.set_count(count);
  }
  return counts;
}

}  // namespace openreg::daemon
