#include "device_daemon/faults/fault_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"

namespace openreg::daemon {

std::vector<uint32_t> FaultRegistry::Arm(const proto::FaultPlan& plan,
                                         uint64_t session_id) {
  const absl::Time now = absl::Now();
  std::vector<uint32_t> ids;
  absl::MutexLock lock(&mutex_);
  for (const proto::FaultSpec& spec : plan.faults()) {
    const uint32_t id = next_id_++;
    // A daemon-wide fault affects every session but still belongs to the
    // session that armed it: only it disarms it, and it ends with it.
    const uint64_t scope = spec.daemon_wide() ? 0 : session_id;
    faults_.push_back(
        std::make_shared<ArmedFault>(id, spec, scope, session_id, now));
    ids.push_back(id);
    Log(LogLevel::kInfo, "armed ", faults_.back()->Describe(),
        session_id != 0 ? absl::StrCat(" for session ", session_id) : "");
  }
  return ids;
}

absl::StatusOr<uint32_t> FaultRegistry::Disarm(const std::vector<uint32_t>& ids,
                                               uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  auto owned = [&](const ArmedFault& fault) {
    return session_id == 0 || fault.owner_session_id == session_id;
  };
  for (uint32_t id : ids) {
    const bool found = std::any_of(
        faults_.begin(), faults_.end(),
        [&](const auto& fault) { return fault->id == id && owned(*fault); });
    if (!found) {
      return MakeError(
          proto::INVALID_HANDLE,
          absl::StrCat("fault ", id, " is not armed",
                       session_id != 0 ? " by this session" : "",
                       " (torch.openreg.faults.list() shows the armed ones)"));
    }
  }
  const size_t before = faults_.size();
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const auto& fault) {
                                 if (!owned(*fault)) return false;
                                 return ids.empty() ||
                                        std::find(ids.begin(), ids.end(),
                                                  fault->id) != ids.end();
                               }),
                faults_.end());
  return static_cast<uint32_t>(before - faults_.size());
}

void FaultRegistry::ForgetSession(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const auto& fault) {
                                 return fault->owner_session_id == session_id ||
                                        fault->trigger.session_id() ==
                                            session_id;
                               }),
                faults_.end());
}

std::vector<proto::ArmedFault> FaultRegistry::List() const {
  absl::ReaderMutexLock lock(&mutex_);
  std::vector<proto::ArmedFault> list;
  for (const auto& fault : faults_) {
    proto::ArmedFault& entry = list.emplace_back();
    entry.set_id(fault->id);
    *entry.mutable_spec() = fault->spec;
    entry.set_session_id(fault->owner_session_id);
    entry.set_matches(fault->trigger.matches());
    entry.set_fired(fault->trigger.fired());
  }
  return list;
}

bool FaultRegistry::empty() const {
  absl::ReaderMutexLock lock(&mutex_);
  return faults_.empty();
}

std::vector<Firing> FaultRegistry::Evaluate(const CommandFacts& facts) const {
  std::vector<Firing> firings;
  absl::ReaderMutexLock lock(&mutex_);
  for (const auto& fault : faults_) {
    std::optional<uint64_t> match = fault->trigger.Evaluate(facts);
    if (match.has_value()) firings.push_back({fault, *match});
  }
  return firings;
}

}  // namespace openreg::daemon
