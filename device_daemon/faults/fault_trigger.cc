#include "device_daemon/faults/fault_trigger.h"

#include <fnmatch.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data_plane/fault_plan.h"

namespace openreg::daemon {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint32_t EffectiveTimes(const proto::FaultSpec& spec) {
  if (spec.trigger().has_times()) return spec.trigger().times();
  // A stuck-at bit is permanent unless told otherwise.
  return spec.has_stuck_at() ? 0 : 1;
}

}  // namespace

std::mt19937_64 FiringRng(uint64_t seed, uint64_t match, uint64_t salt) {
  return std::mt19937_64(
      SplitMix64(seed ^ SplitMix64(match ^ SplitMix64(salt))));
}

FaultTrigger::FaultTrigger(const proto::FaultSpec& spec, uint64_t session_id,
                           absl::Time armed_at)
    : trigger_(spec.trigger()),
      seed_(spec.seed()),
      session_id_(session_id),
      armed_at_(armed_at),
      kind_(faults::EffectiveKind(spec)),
      op_(faults::EffectiveOp(spec)),
      phase_(spec.trigger().has_phase() ? spec.trigger().phase() : -1),
      op_is_glob_(spec.trigger().op().find_first_of("*?[") !=
                  std::string::npos),
      times_(EffectiveTimes(spec)) {}

bool FaultTrigger::OpMatches(absl::string_view name,
                             absl::string_view overload) const {
  const std::string& pattern = op_;
  if (pattern.empty()) return true;
  if (op_is_glob_) return GlobMatches(name, overload);
  if (pattern == name) return true;  // every overload
  // "name.overload" without building it.
  return pattern.size() == name.size() + 1 + overload.size() &&
         absl::StartsWith(pattern, name) && pattern[name.size()] == '.' &&
         absl::EndsWith(pattern, overload) && !overload.empty();
}

bool FaultTrigger::GlobMatches(absl::string_view name,
                               absl::string_view overload) const {
  // A per-thread buffer: "name.overload", NUL-terminated for fnmatch,
  // without allocating once warm.
  thread_local std::string full;
  full.assign(name.data(), name.size());
  if (!overload.empty()) {
    full.push_back('.');
    full.append(overload.data(), overload.size());
  }
  {
    absl::ReaderMutexLock lock(&glob_mutex_);
    auto cached = glob_results_.find(full);
    if (cached != glob_results_.end()) return cached->second;
  }
  const std::string& pattern = op_;
  bool matched = fnmatch(pattern.c_str(), full.c_str(), 0) == 0;
  if (!matched) {
    const std::string bare(name);
    matched = fnmatch(pattern.c_str(), bare.c_str(), 0) == 0;
  }
  absl::MutexLock lock(&glob_mutex_);
  glob_results_.emplace(full, matched);
  return matched;
}

bool FaultTrigger::Matches(const CommandFacts& facts) const {
  if (session_id_ != 0 && facts.session_id != session_id_) return false;
  if (kind_ != proto::ANY && facts.kind != kind_) return false;
  if (trigger_.has_device() && facts.device != trigger_.device()) return false;
  if (trigger_.has_pid() && facts.pid != trigger_.pid()) return false;
  if (trigger_.has_stream() && facts.stream != trigger_.stream()) return false;
  if (phase_ >= 0 && facts.phase != phase_) return false;
  if (trigger_.has_output() &&
      facts.written_tensors <= static_cast<int>(trigger_.output())) {
    return false;
  }
  if (trigger_.has_input() &&
      facts.tensor_arguments <= static_cast<int>(trigger_.input())) {
    return false;
  }
  if (!trigger_.group().empty() && facts.group != trigger_.group() &&
      facts.group_desc != trigger_.group()) {
    return false;
  }
  if (trigger_.has_rank() && facts.rank != trigger_.rank()) return false;
  if (trigger_.has_collective_number() &&
      facts.collective_number != trigger_.collective_number()) {
    return false;
  }
  return OpMatches(facts.name, facts.overload);
}

std::optional<uint64_t> FaultTrigger::Evaluate(const CommandFacts& facts) {
  if (!Matches(facts)) return std::nullopt;
  absl::MutexLock lock(&mutex_);
  const uint64_t match = ++matches_;
  if (times_ != 0 && fired_ >= times_) return std::nullopt;
  if (trigger_.has_window_start_seconds() ||
      trigger_.has_window_end_seconds()) {
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - armed_at_);
    if (elapsed < trigger_.window_start_seconds()) return std::nullopt;
    if (trigger_.has_window_end_seconds() &&
        elapsed >= trigger_.window_end_seconds()) {
      return std::nullopt;
    }
  }
  bool candidate = true;
  if (trigger_.nth() != 0) {
    candidate = match == trigger_.nth();
  } else if (trigger_.after() != 0) {
    candidate = match > trigger_.after();
  } else if (trigger_.every() != 0) {
    candidate = match % trigger_.every() == 0;
  }
  if (!candidate) return std::nullopt;
  if (trigger_.has_probability() && trigger_.probability() < 1) {
    std::mt19937_64 rng = FiringRng(seed_, match, /*salt=*/0);
    if (std::uniform_real_distribution<double>(0, 1)(rng) >=
        trigger_.probability()) {
      return std::nullopt;
    }
  }
  ++fired_;
  return match;
}

uint64_t FaultTrigger::matches() const {
  absl::MutexLock lock(&mutex_);
  return matches_;
}

uint64_t FaultTrigger::fired() const {
  absl::MutexLock lock(&mutex_);
  return fired_;
}

}  // namespace openreg::daemon
