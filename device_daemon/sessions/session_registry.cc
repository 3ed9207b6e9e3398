#include "device_daemon/sessions/session_registry.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"

namespace openreg::daemon {
namespace {

absl::StatusOr<uint64_t> RandomToken() {
  uint64_t token = 0;
  while (token == 0) {
    const ssize_t got = getrandom(&token, sizeof(token), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(token))) {
      return absl::InternalError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
  }
  return token;
}

// Compares tokens without an early exit, so that timing does not reveal
// how much of a guessed token was right.
bool TokensEqual(uint64_t a, uint64_t b) {
  volatile uint64_t difference = a ^ b;
  return difference == 0;
}

}  // namespace

SessionRegistry::SessionRegistry(Devices* devices, StreamEngine* engine,
                                 const SessionLimits& limits,
                                 const SessionQuota& quota)
    : devices_(devices),
      engine_(engine),
      limits_(limits),
      quota_(quota),
      idle_since_(absl::Now()) {}

absl::Status SessionRegistry::Reserve(const PeerCredentials& peer) {
  if (draining_) {
    return MakeError(
        proto::DAEMON_UNAVAILABLE,
        "the daemon is draining (openreg-ctl drain): it accepts no new "
        "sessions and stops once its clients are done; use another daemon "
        "(OPENREG_DAEMON_SOCKET), or ask its operator to accept sessions "
        "again (openreg-ctl drain --off)");
  }
  if (quota_.per_process != 0 && per_process_[peer.pid] >= quota_.per_process) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("process ", peer.pid, " already has ", quota_.per_process,
                     " sessions attached, the daemon's limit per process "
                     "(openreg-daemon --max_sessions_per_process): a process "
                     "needs one; detach the ones it no longer uses"));
  }
  if (quota_.per_uid != 0 && per_uid_[peer.uid] >= quota_.per_uid) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("uid ", peer.uid, " already has ", quota_.per_uid,
                     " sessions attached, the daemon's limit per user "
                     "(openreg-daemon --max_sessions_per_uid): end some "
                     "client processes or raise the limit"));
  }
  ++per_process_[peer.pid];
  ++per_uid_[peer.uid];
  return absl::OkStatus();
}

void SessionRegistry::Unreserve(pid_t pid, uid_t uid) {
  if (--per_process_[pid] == 0) per_process_.erase(pid);
  if (--per_uid_[uid] == 0) per_uid_.erase(uid);
}

SessionRegistry::~SessionRegistry() { CloseAll(); }

absl::StatusOr<std::shared_ptr<Session>> SessionRegistry::Create(
    const PeerCredentials& peer, const std::string& client_name) {
  absl::StatusOr<uint64_t> token = RandomToken();
  if (!token.ok()) return token.status();
  SessionIdentity identity;
  {
    absl::MutexLock lock(&mutex_);
    if (absl::Status reserved = Reserve(peer); !reserved.ok()) return reserved;
    identity.id = next_id_++;
  }
  identity.token = *token;
  identity.peer = peer;
  identity.client_name = client_name;
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Create(std::move(identity), devices_, engine_, limits_);
  if (!session.ok()) {
    absl::MutexLock lock(&mutex_);
    Unreserve(peer.pid, peer.uid);
    return session.status();
  }
  std::shared_ptr<Session> shared = *std::move(session);
  absl::MutexLock lock(&mutex_);
  sessions_[shared->id()] = shared;
  ++sessions_served_;
  idle_since_ = absl::InfiniteFuture();
  return shared;
}

absl::StatusOr<std::shared_ptr<Session>> SessionRegistry::Find(
    const proto::SessionRef& ref) const {
  absl::ReaderMutexLock lock(&mutex_);
  auto found = sessions_.find(ref.session_id());
  if (found == sessions_.end() ||
      !TokensEqual(found->second->token(), ref.token())) {
    return InvalidHandleError(
        absl::StrCat("session ", ref.session_id(),
                     " is not attached (ended, or wrong token): attach again"));
  }
  return found->second;
}

absl::Status SessionRegistry::Remove(uint64_t session_id,
                                     absl::string_view reason) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mutex_);
    auto found = sessions_.find(session_id);
    if (found == sessions_.end() || !closing_.insert(session_id).second) {
      return absl::NotFoundError(
          absl::StrCat("session ", session_id, " is not attached"));
    }
    session = found->second;
  }
  const uint64_t allocated = session->allocated_bytes();
  session->Close();
  {
    absl::MutexLock lock(&mutex_);
    sessions_.erase(session_id);
    closing_.erase(session_id);
    Unreserve(session->pid(), session->uid());
    if (sessions_.empty()) idle_since_ = absl::Now();
  }
  Log(LogLevel::kInfo, "detached session ", session_id, " (pid ",
      session->pid(), "): ", reason, "; released ", allocated,
      " bytes of device memory");
  return absl::OkStatus();
}

void SessionRegistry::CloseAll() {
  std::map<uint64_t, std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mutex_);
    sessions.swap(sessions_);
    if (!sessions.empty()) idle_since_ = absl::Now();
  }
  for (auto& [id, session] : sessions) session->Close();
  absl::MutexLock lock(&mutex_);
  per_process_.clear();
  per_uid_.clear();
}

std::vector<std::shared_ptr<Session>> SessionRegistry::Snapshot() const {
  absl::ReaderMutexLock lock(&mutex_);
  std::vector<std::shared_ptr<Session>> sessions;
  sessions.reserve(sessions_.size());
  for (const auto& [id, session] : sessions_) sessions.push_back(session);
  return sessions;
}

size_t SessionRegistry::attached_count() const {
  absl::ReaderMutexLock lock(&mutex_);
  return sessions_.size();
}

uint64_t SessionRegistry::sessions_served() const {
  absl::ReaderMutexLock lock(&mutex_);
  return sessions_served_;
}

absl::Time SessionRegistry::idle_since() const {
  absl::ReaderMutexLock lock(&mutex_);
  return idle_since_;
}

void SessionRegistry::SetDraining(bool draining) {
  absl::MutexLock lock(&mutex_);
  draining_ = draining;
}

bool SessionRegistry::draining() const {
  absl::ReaderMutexLock lock(&mutex_);
  return draining_;
}

}  // namespace openreg::daemon
