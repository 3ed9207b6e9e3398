#include "runtime_client/client.h"

#include <pthread.h>

#include <mutex>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "runtime_client/command_phase.h"
#include "runtime_client/connection.h"
#include "runtime_client/status_util.h"

namespace openreg::client {

Client& Client::Get() {
  // Leaked on purpose: threads may still call in while statics are being
  // destroyed at exit, and the daemon detaches us when the process ends.
  static Client* client = [] {
    // Debian's Abseil is built without NDEBUG, so every Mutex operation
    // would also update the deadlock-detection graph: a measurable share of
    // the per-op cost. The client's lock order is fixed (see session.h).
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    return new Client;
  }();
  return *client;
}

void Client::AfterForkInChild() {
  // Only atomics here: the child has a single thread and any mutex may be
  // held by a parent thread that was not copied.
  Client& client = Get();
  client.inherited_session_.store(
      client.current_session_.load(std::memory_order_acquire),
      std::memory_order_release);
}

absl::Status Client::InheritedSessionError() const {
  return MakeError(Error::kInternal,
                   // The first sentence is CUDA's (and PyTorch's reference
                   // backend's), which scripts and tests match.
                   "Cannot re-initialize OpenReg in forked subprocess. To "
                   "use OpenReg with multiprocessing, you must use the "
                   "'spawn' start method (openreg: this process was forked "
                   "from a process that had attached to the daemon, and the "
                   "session belongs to the parent; use openreg in the "
                   "parent only, or start children with 'spawn' instead of "
                   "'fork')");
}

std::shared_ptr<Session> Client::CurrentSession() {
  absl::ReaderMutexLock lock(&mutex_);
  if (session_.get() == inherited_session_.load(std::memory_order_acquire)) {
    return nullptr;  // not ours to use (see GetSession)
  }
  return session_;
}

absl::StatusOr<std::shared_ptr<Session>> Client::GetSession() {
  std::shared_ptr<Session> session;
  {
    absl::ReaderMutexLock lock(&mutex_);
    session = session_;
  }
  if (session == nullptr) {
    absl::MutexLock connect_lock(&connect_mutex_);
    {
      absl::ReaderMutexLock lock(&mutex_);
      session = session_;  // another thread may have connected
    }
    if (session == nullptr) {
      absl::StatusOr<Connection> connection = ConnectToDaemon();
      if (!connection.ok()) return connection.status();
      session = std::make_shared<Session>(std::move(*connection));
      absl::Status armed = ArmFaultPlanFromEnvironment(*session);
      if (!armed.ok()) {
        session->Detach().IgnoreError();
        return armed;
      }
      static std::once_flag fork_handler_installed;
      std::call_once(fork_handler_installed, [] {
        pthread_atfork(nullptr, nullptr, &Client::AfterForkInChild);
      });
      absl::MutexLock lock(&mutex_);
      session_ = session;
      current_session_.store(session.get(), std::memory_order_release);
    }
  }
  if (session.get() == inherited_session_.load(std::memory_order_acquire)) {
    return InheritedSessionError();
  }
  absl::Status alive = session->CheckAlive();
  if (!alive.ok()) return alive;
  return session;
}

bool Client::InForkedChild() {
  absl::ReaderMutexLock lock(&mutex_);
  return session_ != nullptr &&
         session_.get() == inherited_session_.load(std::memory_order_acquire);
}

absl::Status Client::Shutdown() {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock connect_lock(&connect_mutex_);
    absl::MutexLock lock(&mutex_);
    session = std::move(session_);
    current_session_.store(nullptr, std::memory_order_release);
  }
  if (session == nullptr) return absl::OkStatus();
  // A forked child must neither detach (that would end the parent's
  // session) nor destroy the inherited gRPC channel (gRPC's threads were
  // not forked): it forgets the session and leaks it.
  if (session.get() == inherited_session_.load(std::memory_order_acquire)) {
    new std::shared_ptr<Session>(std::move(session));
    return absl::OkStatus();
  }
  return session->Detach();
}

absl::Status WithSession(absl::FunctionRef<absl::Status(Session&)> body) {
  absl::StatusOr<std::shared_ptr<Session>> session = Client::Get().GetSession();
  if (!session.ok()) return session.status();
  return body(**session);
}

}  // namespace openreg::client
