// The process-wide client: owns the current Session and creates it lazily
// at the first call that needs the daemon (never at library load), once,
// even when many threads make their first call at the same time.
#ifndef OPENREG_RUNTIME_CLIENT_CLIENT_H_
#define OPENREG_RUNTIME_CLIENT_CLIENT_H_

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime_client/session.h"

namespace openreg::client {

class Client {
 public:
  static Client& Get();

  // The attached session, connecting (and maybe spawning the daemon) first
  // if there is none. Fails with kDeviceLost while the current session's
  // daemon is dead, until Shutdown() drops it, and in a child forked from
  // a process with a session (the session and its rings are the
  // parent's; a child writing into them would corrupt the parent's
  // streams).
  absl::StatusOr<std::shared_ptr<Session>> GetSession();
  // The current session without connecting; null when there is none.
  std::shared_ptr<Session> CurrentSession();
  // Detaches and drops the current session; the next call attaches anew.
  absl::Status Shutdown();
  // True in a child forked from a process with a session, until Shutdown()
  // forgets the inherited session.
  bool InForkedChild();

 private:
  Client() = default;

  static void AfterForkInChild();
  absl::Status InheritedSessionError() const;

  // Held while connecting, which can take seconds (autospawn); kept apart
  // from mutex_ so that CurrentSession() never waits for a connect.
  absl::Mutex connect_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  absl::Mutex mutex_;
  // Shared: threads keep using a session (and its mapping) while another
  // thread shuts it down.
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mutex_);
  // session_.get(), readable without the mutex from the fork handler (the
  // mutex may be held by a thread that does not exist in the child).
  std::atomic<Session*> current_session_{nullptr};
  // The session this process inherited through fork(), if any.
  std::atomic<Session*> inherited_session_{nullptr};
};

// Runs `body` with the attached session (connecting first if needed).
absl::Status WithSession(absl::FunctionRef<absl::Status(Session&)> body);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_CLIENT_H_
