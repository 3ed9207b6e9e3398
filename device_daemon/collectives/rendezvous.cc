#include "device_daemon/collectives/rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "device_daemon/devices/blocking_region.h"

namespace openreg::daemon {

Rendezvous::Rendezvous(int size, std::vector<int> names)
    : size_(size), names_(std::move(names)) {}

int Rendezvous::Name(int rank) const {
  return rank < static_cast<int>(names_.size()) ? names_[rank] : rank;
}

absl::Status Rendezvous::Arrive(int rank, uint64_t sequence, Part part,
                                const Runner& run, absl::Time deadline,
                                const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&mutex_);
  if (!aborted_.ok()) return aborted_;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside a communicator of ", size_, " ranks"));
  }
  Round& round = rounds_[sequence];
  if (round.parts.empty()) {
    round.parts.resize(size_);
    round.arrived_at.resize(size_);
  }
  if (round.parts[rank].has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", Name(rank), " arrived twice at collective ", sequence));
  }
  round.parts[rank] = std::move(part);
  round.arrived_at[rank] = absl::Now();
  ++round.arrived;
  if (round.arrived == size_) {
    round.outcome = RunLocked(sequence, round, run);
    round.done = true;
  } else {
    const auto finished = [this, &round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                              mutex_) { return round.done || !aborted_.ok(); };
    bool finished_in_time = false;
    {
      // The ranks still to come may be streams of this very device.
      const BlockingRegion blocking;
      while (true) {
        const absl::Time until =
            cancelled ? std::min(deadline, absl::Now() + kCancelCheck)
                      : deadline;
        finished_in_time =
            mutex_.AwaitWithDeadline(absl::Condition(&finished), until);
        if (finished_in_time || absl::Now() >= deadline) break;
        if (cancelled && cancelled()) {
          absl::Status stopped = absl::CancelledError(
              absl::StrCat("collective ", sequence, ": rank ", Name(rank),
                           " stopped waiting (its stream is being stopped)"));
          if (aborted_.ok()) aborted_ = stopped;
          return stopped;
        }
      }
    }
    if (!finished_in_time) {
      absl::Status timed_out = absl::DeadlineExceededError(
          absl::StrCat("collective ", sequence, ": rank ", Name(rank),
                       " waited past its timeout for rank(s) ",
                       MissingRanksLocked(round), ", which did not arrive"));
      if (aborted_.ok()) aborted_ = timed_out;
      return timed_out;
    }
    if (!round.done) return aborted_;
  }
  absl::Status outcome = round.outcome;
  if (++round.departed == size_) rounds_.erase(sequence);
  return outcome;
}

absl::Status Rendezvous::RunLocked(uint64_t sequence, Round& round,
                                   const Runner& run) {
  std::vector<const Part*> parts;
  parts.reserve(size_);
  for (const std::optional<Part>& part : round.parts) parts.push_back(&*part);
  for (int rank = 1; rank < size_; ++rank) {
    if (parts[rank]->signature != parts[0]->signature) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective ", sequence, ": ranks disagree on the operation: rank ",
          Name(0), " ", parts[0]->signature, ", rank ", Name(rank), " ",
          parts[rank]->signature,
          " (every rank must call the same collectives in the same order)"));
    }
  }
  // The other ranks wait for `done`, which only this thread sets: the parts
  // stay put while the collective runs without the lock.
  mutex_.Unlock();
  absl::Status outcome = run(parts);
  mutex_.Lock();
  return outcome;
}

std::string Rendezvous::MissingRanksLocked(const Round& round) const {
  std::vector<int> missing;
  for (int rank = 0; rank < size_; ++rank) {
    if (!round.parts[rank].has_value()) missing.push_back(Name(rank));
  }
  return absl::StrJoin(missing, ", ");
}

std::vector<Rendezvous::Waiting> Rendezvous::WaitingRounds() const {
  absl::MutexLock lock(&mutex_);
  std::vector<Waiting> waiting;
  if (!aborted_.ok()) return waiting;
  for (const auto& [sequence, round] : rounds_) {
    if (round.done || round.arrived == 0) continue;
    Waiting entry;
    entry.sequence = sequence;
    for (int rank = 0; rank < size_; ++rank) {
      if (round.parts[rank].has_value()) {
        if (entry.signature.empty()) {
          entry.signature = round.parts[rank]->signature;
        }
        entry.arrived.emplace_back(Name(rank), round.arrived_at[rank]);
      } else {
        entry.missing.push_back(Name(rank));
      }
    }
    waiting.push_back(std::move(entry));
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const Waiting& a, const Waiting& b) {
              return a.sequence < b.sequence;
            });
  return waiting;
}

void Rendezvous::Abort(absl::Status why) {
  absl::MutexLock lock(&mutex_);
  if (aborted_.ok() && !why.ok()) aborted_ = std::move(why);
}

absl::Status Rendezvous::aborted() const {
  absl::MutexLock lock(&mutex_);
  return aborted_;
}

}  // namespace openreg::daemon
