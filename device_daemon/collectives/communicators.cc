#include "device_daemon/collectives/communicators.h"

#include <algorithm>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

// As c10d's store keys and NCCL's unique ids: short, opaque.
constexpr size_t kMaxIdBytes = 256;
// One communicator spans at most this many ranks of one daemon.
constexpr int kMaxRanks = 1024;

}  // namespace

Communicator::Communicator(std::string id, int size, absl::Duration timeout)
    : id_(std::move(id)),
      timeout_(timeout),
      rendezvous_(size),
      recorder_(size) {
  absl::MutexLock lock(&mutex_);
  members_.resize(size);
}

Rendezvous& Communicator::Channel(int from, int to) {
  absl::MutexLock lock(&mutex_);
  auto [channel, created] = channels_.try_emplace(std::make_pair(from, to), 2,
                                                  std::vector<int>{from, to});
  if (created && !aborted_.ok()) channel->second.Abort(aborted_);
  for (const int rank : {from, to}) {
    auto gone = left_.find(rank);
    if (created && gone != left_.end()) channel->second.Abort(gone->second);
  }
  return channel->second;
}

void Communicator::Abort(const absl::Status& why) {
  rendezvous_.Abort(why);
  absl::MutexLock lock(&mutex_);
  if (aborted_.ok()) aborted_ = why;
  for (auto& [ranks, channel] : channels_) channel.Abort(why);
}

void Communicator::AbortWithout(int rank, const absl::Status& why) {
  rendezvous_.Abort(why);
  absl::MutexLock lock(&mutex_);
  left_.try_emplace(rank, why);
  for (auto& [ranks, channel] : channels_) {
    if (ranks.first == rank || ranks.second == rank) channel.Abort(why);
  }
}

std::vector<pid_t> Communicator::MemberPids() const {
  absl::MutexLock lock(&mutex_);
  std::vector<pid_t> pids;
  for (const Member& member : members_) {
    if (member.pid != 0) pids.push_back(member.pid);
  }
  return pids;
}

CommunicatorStats Communicator::Stats() const {
  CommunicatorStats stats;
  stats.id = id_;
  stats.size = size();
  stats.timeout = timeout_;
  stats.aborted = rendezvous_.aborted();
  for (Rendezvous::Waiting& waiting : rendezvous_.WaitingRounds()) {
    stats.pending.push_back({false, -1, -1, std::move(waiting)});
  }
  absl::MutexLock lock(&mutex_);
  for (int rank = 0; rank < static_cast<int>(members_.size()); ++rank) {
    stats.members.push_back({rank, members_[rank].pid, members_[rank].joined});
  }
  if (stats.aborted.ok()) stats.aborted = aborted_;
  for (const auto& [ranks, channel] : channels_) {
    for (Rendezvous::Waiting& waiting : channel.WaitingRounds()) {
      stats.pending.push_back(
          {true, ranks.first, ranks.second, std::move(waiting)});
    }
  }
  return stats;
}

std::string Communicator::DescribeRank(int rank) const {
  absl::MutexLock lock(&mutex_);
  if (rank < 0 || rank >= static_cast<int>(members_.size()) ||
      !members_[rank].joined) {
    return absl::StrCat("rank ", rank, " (not joined)");
  }
  return absl::StrCat("rank ", rank, " (pid ", members_[rank].pid, ")");
}

absl::StatusOr<uint64_t> Communicators::Join(const std::string& id, int size,
                                             int rank, uint64_t session_id,
                                             pid_t pid,
                                             absl::Duration timeout) {
  if (id.empty() || id.size() > kMaxIdBytes) {
    return InvalidValueError(absl::StrCat(
        "a communicator id has 1 to ", kMaxIdBytes, " bytes, not ", id.size()));
  }
  if (size < 1 || size > kMaxRanks) {
    return InvalidValueError(absl::StrCat("a communicator has 1 to ", kMaxRanks,
                                          " ranks, not ", size));
  }
  if (rank < 0 || rank >= size) {
    return InvalidValueError(absl::StrCat(
        "rank ", rank, " is outside a communicator of ", size, " ranks"));
  }
  if (timeout <= absl::ZeroDuration()) {
    return InvalidValueError("a communicator's timeout must be positive");
  }
  absl::MutexLock lock(&mutex_);
  std::shared_ptr<Communicator>& communicator = by_id_[id];
  if (communicator == nullptr) {
    communicator = std::make_shared<Communicator>(id, size, timeout);
  } else if (communicator->size() != size) {
    return InvalidValueError(absl::StrCat("communicator ", id, " has ",
                                          communicator->size(), " ranks; rank ",
                                          rank, " joined it as one of ", size));
  }
  {
    absl::MutexLock members(&communicator->mutex_);
    Communicator::Member& member = communicator->members_[rank];
    if (member.joined) {
      return InvalidValueError(absl::StrCat("rank ", rank, " of communicator ",
                                            id, " is taken by pid ",
                                            member.pid));
    }
    member.joined = true;
    member.session_id = session_id;
    member.pid = pid;
  }
  const uint64_t handle = next_handle_++;
  by_session_[session_id][handle] = Handle{communicator, rank};
  return handle;
}

absl::StatusOr<Communicators::Membership> Communicators::Find(
    uint64_t session_id, uint64_t handle) const {
  absl::MutexLock lock(&mutex_);
  auto session = by_session_.find(session_id);
  if (session != by_session_.end()) {
    auto found = session->second.find(handle);
    if (found != session->second.end()) {
      return Membership{found->second.communicator, found->second.rank};
    }
  }
  return InvalidHandleError(
      absl::StrCat("communicator ", handle, " is not one this session joined"));
}

absl::Status Communicators::Leave(uint64_t session_id, uint64_t handle,
                                  bool abort) {
  absl::MutexLock lock(&mutex_);
  auto session = by_session_.find(session_id);
  if (session == by_session_.end() || !session->second.contains(handle)) {
    return InvalidHandleError(absl::StrCat("communicator ", handle,
                                           " is not one this session joined"));
  }
  if (abort) {
    const Handle& member = session->second[handle];
    const absl::Status why =
        MakeError(proto::COLLECTIVE_FAILURE,
                  absl::StrCat("communicator ", member.communicator->id(),
                               " was aborted by ",
                               member.communicator->DescribeRank(member.rank)));
    LeaveLocked(session_id, handle, &why);
  } else {
    // The ranks still here can no longer meet this one: their collectives,
    // and their transfers with it, fail now instead of at the timeout.
    const Handle& member = session->second[handle];
    member.communicator->AbortWithout(
        member.rank,
        MakeError(proto::COLLECTIVE_FAILURE,
                  absl::StrCat(member.communicator->DescribeRank(member.rank),
                               " left communicator ", member.communicator->id(),
                               " (its process group was destroyed)")));
    LeaveLocked(session_id, handle, nullptr);
  }
  return absl::OkStatus();
}

void Communicators::SessionClosed(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  auto session = by_session_.find(session_id);
  if (session == by_session_.end()) return;
  std::vector<uint64_t> handles;
  for (const auto& [handle, member] : session->second) {
    handles.push_back(handle);
  }
  for (uint64_t handle : handles) {
    const Handle& member = by_session_[session_id][handle];
    const absl::Status why =
        MakeError(proto::COLLECTIVE_FAILURE,
                  absl::StrCat(member.communicator->DescribeRank(member.rank),
                               " of communicator ", member.communicator->id(),
                               " ended (its process exited or detached)"));
    LeaveLocked(session_id, handle, &why);
  }
}

void Communicators::LeaveLocked(uint64_t session_id, uint64_t handle,
                                const absl::Status* abort_with) {
  auto session = by_session_.find(session_id);
  const Handle member = session->second[handle];
  session->second.erase(handle);
  if (session->second.empty()) by_session_.erase(session);
  if (abort_with != nullptr) {
    member.communicator->Abort(*abort_with);
  }
  bool anyone_left = false;
  {
    absl::MutexLock members(&member.communicator->mutex_);
    member.communicator->members_[member.rank].joined = false;
    for (const Communicator::Member& other : member.communicator->members_) {
      anyone_left = anyone_left || other.joined;
    }
  }
  if (!anyone_left) {
    auto found = by_id_.find(member.communicator->id());
    if (found != by_id_.end() && found->second == member.communicator) {
      by_id_.erase(found);
    }
  }
}

std::vector<CommunicatorStats> Communicators::Stats() const {
  std::vector<std::shared_ptr<Communicator>> alive;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [id, communicator] : by_id_) alive.push_back(communicator);
  }
  std::vector<CommunicatorStats> stats;
  stats.reserve(alive.size());
  for (const std::shared_ptr<Communicator>& communicator : alive) {
    stats.push_back(communicator->Stats());
  }
  std::sort(stats.begin(), stats.end(),
            [](const CommunicatorStats& a, const CommunicatorStats& b) {
              return a.id < b.id;
            });
  return stats;
}

std::vector<std::shared_ptr<Communicator>> Communicators::JobOf(
    pid_t pid) const {
  std::vector<std::shared_ptr<Communicator>> alive;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [id, communicator] : by_id_) alive.push_back(communicator);
  }
  std::vector<std::vector<pid_t>> pids;
  pids.reserve(alive.size());
  absl::flat_hash_set<pid_t> job;
  for (const std::shared_ptr<Communicator>& communicator : alive) {
    pids.push_back(communicator->MemberPids());
    if (absl::c_linear_search(pids.back(), pid)) {
      job.insert(pids.back().begin(), pids.back().end());
    }
  }
  std::vector<std::shared_ptr<Communicator>> found;
  for (size_t i = 0; i < alive.size(); ++i) {
    if (absl::c_any_of(pids[i], [&job](pid_t p) { return job.contains(p); })) {
      found.push_back(alive[i]);
    }
  }
  std::sort(
      found.begin(), found.end(),
      [](const std::shared_ptr<Communicator>& a,
         const std::shared_ptr<Communicator>& b) { return a->id() < b->id(); });
  return found;
}

size_t Communicators::size() const {
  absl::MutexLock lock(&mutex_);
  return by_id_.size();
}

}  // namespace openreg::daemon
