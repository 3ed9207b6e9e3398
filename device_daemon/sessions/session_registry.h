// All attached sessions, by id. Creates sessions (with a fresh id and a
// random secret token), resolves SessionRefs from control requests, tears
// sessions down and tracks how long the daemon has been without clients.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_REGISTRY_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/sessions/session.h"
#include "protos/control.pb.h"

namespace openreg::daemon {

class StreamEngine;

// How many sessions may be attached at once, per client process and per
// uid (--max_sessions_per_process, --max_sessions_per_uid): a process
// normally holds one, and each session costs the daemon its segment and
// stream state. 0 = no limit.
struct SessionQuota {
  uint32_t per_process = 32;
  uint32_t per_uid = 256;
};

class SessionRegistry {
 public:
  // `devices` and `engine` (may be null: no streams run) must outlive
  // the registry.
  SessionRegistry(Devices* devices, StreamEngine* engine,
                  const SessionLimits& limits = SessionLimits(),
                  const SessionQuota& quota = SessionQuota());
  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;
  ~SessionRegistry();  // closes every session

  // RESOURCE_EXHAUSTED when the peer's process or uid has its quota of
  // sessions attached; DAEMON_UNAVAILABLE while draining.
  absl::StatusOr<std::shared_ptr<Session>> Create(
      const PeerCredentials& peer, const std::string& client_name);

  // The session `ref` names if its token matches; INVALID_HANDLE otherwise
  // (same message for a wrong id and a wrong token).
  absl::StatusOr<std::shared_ptr<Session>> Find(
      const proto::SessionRef& ref) const;

  // Closes the session (stops its streams, frees its memory), then removes
  // it, so that statistics never show a removed session's memory as still
  // allocated. NotFound when it is already gone or being removed.
  absl::Status Remove(uint64_t session_id, absl::string_view reason);

  // Closes every session (daemon shutdown).
  void CloseAll();

  std::vector<std::shared_ptr<Session>> Snapshot() const;
  size_t attached_count() const;
  uint64_t sessions_served() const;
  // When the last session went away (or the registry was created);
  // absl::InfiniteFuture() while sessions are attached.
  absl::Time idle_since() const;

  // While draining (openreg-ctl drain), new sessions are refused; attached
  // ones go on.
  void SetDraining(bool draining);
  bool draining() const;

 private:
  // Counts `peer`'s attached and attaching sessions against the quota and
  // reserves one more.
  absl::Status Reserve(const PeerCredentials& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Unreserve(pid_t pid, uid_t uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Devices* const devices_;
  StreamEngine* const engine_;
  const SessionLimits limits_;
  const SessionQuota quota_;

  mutable absl::Mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mutex_);
  // Sessions being closed by Remove(); still listed in sessions_.
  std::set<uint64_t> closing_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  // Sessions attached or being created, by client pid and by uid.
  std::map<pid_t, uint32_t> per_process_ ABSL_GUARDED_BY(mutex_);
  std::map<uid_t, uint32_t> per_uid_ ABSL_GUARDED_BY(mutex_);
  uint64_t sessions_served_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time idle_since_ ABSL_GUARDED_BY(mutex_);
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_REGISTRY_H_
