// The daemon's communicators: groups of ranks (sessions, one rank each)
// whose collectives run in the daemon. The ranks learn a communicator's id
// from their job's c10d store (as NCCL's unique id travels) and join it
// here through the control plane (CommInitRank); the daemon keeps no other
// record of which sessions belong together.
//
// Promises:
// - The first rank to join creates the communicator with its size and
//   timeout; later ranks must name the same size. A rank joins once.
// - A session ending aborts every communicator it is a rank of: the other
//   ranks' waiting and later collectives fail, naming the rank and its pid.
// - A rank that leaves (CommDestroy) fails the collectives the others
//   wait for or issue later, and their transfers with it, naming it.
// - A communicator is forgotten once its last rank left (CommDestroy or
//   its session ended); its id may then be used again.
#ifndef OPENREG_DEVICE_DAEMON_COLLECTIVES_COMMUNICATORS_H_
#define OPENREG_DEVICE_DAEMON_COLLECTIVES_COMMUNICATORS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device_daemon/collectives/flight_recorder.h"
#include "device_daemon/collectives/rendezvous.h"

namespace openreg::daemon {

// What GetStats shows of a communicator (docs/DISTRIBUTED.md, "The
// daemon's view").
struct CommunicatorStats {
  struct Member {
    int rank = 0;
    pid_t pid = 0;
    bool joined = false;
  };
  struct Pending {
    bool transfer = false;
    int from = -1;  // a transfer's sender and receiver
    int to = -1;
    Rendezvous::Waiting waiting;
  };
  std::string id;
  int size = 0;
  absl::Duration timeout;
  std::vector<Member> members;
  std::vector<Pending> pending;
  absl::Status aborted;
};

class Communicator {
 public:
  Communicator(std::string id, int size, absl::Duration timeout);

  const std::string& id() const { return id_; }
  int size() const { return rendezvous_.size(); }
  // How long a rank waits for the others at one collective.
  absl::Duration timeout() const { return timeout_; }
  Rendezvous& rendezvous() { return rendezvous_; }
  // Where rank `from`'s sends to rank `to` meet `to`'s receives from
  // `from` (created on first use; born aborted once the communicator is).
  Rendezvous& Channel(int from, int to);
  // Aborts the collectives' rendezvous and every channel (the first
  // status is kept).
  void Abort(const absl::Status& why);
  // Rank `rank` left: aborts the collectives' rendezvous and the channels
  // to and from it; transfers between the other ranks go on.
  void AbortWithout(int rank, const absl::Status& why);

  // "rank 1 (pid 4242)", for messages.
  std::string DescribeRank(int rank) const;
  CommunicatorStats Stats() const;
  // Each rank's last collectives (flight_recorder.h).
  FlightRecorder& recorder() { return recorder_; }
  const FlightRecorder& recorder() const { return recorder_; }
  // True the first time only: one dump per communicator on a timeout.
  bool TakeTimeoutDump() { return !timeout_dumped_.exchange(true); }
  // The pids of its ranks, those that left included.
  std::vector<pid_t> MemberPids() const;

 private:
  friend class Communicators;
  struct Member {
    uint64_t session_id = 0;
    pid_t pid = 0;
    bool joined = false;
  };

  const std::string id_;
  const absl::Duration timeout_;
  Rendezvous rendezvous_;
  FlightRecorder recorder_;
  std::atomic<bool> timeout_dumped_{false};
  mutable absl::Mutex mutex_;
  std::vector<Member> members_ ABSL_GUARDED_BY(mutex_);
  // (from, to) -> channel; node-based: ranks hold references.
  absl::node_hash_map<std::pair<int, int>, Rendezvous> channels_
      ABSL_GUARDED_BY(mutex_);
  absl::Status aborted_ ABSL_GUARDED_BY(mutex_);
  // Ranks that left, and why: channels to them are born aborted.
  absl::flat_hash_map<int, absl::Status> left_ ABSL_GUARDED_BY(mutex_);
};

class Communicators {
 public:
  // A session's rank in a communicator.
  struct Membership {
    std::shared_ptr<Communicator> communicator;
    int rank = 0;
  };

  // Rank `rank` of a `size`-rank communicator `id` joins, for session
  // `session_id` of process `pid`. Returns the session's handle for it.
  // INVALID_VALUE for a bad size, rank or timeout, a size that differs
  // from the communicator's, or a rank already taken.
  absl::StatusOr<uint64_t> Join(const std::string& id, int size, int rank,
                                uint64_t session_id, pid_t pid,
                                absl::Duration timeout);
  // INVALID_HANDLE unless `handle` is a communicator `session_id` joined.
  absl::StatusOr<Membership> Find(uint64_t session_id, uint64_t handle) const;
  // The session's rank leaves (CommDestroy). With `abort`, the
  // communicator is aborted first: the other ranks' collectives fail.
  absl::Status Leave(uint64_t session_id, uint64_t handle, bool abort);
  // Aborts and leaves every communicator of the session.
  void SessionClosed(uint64_t session_id);

  // Communicators alive now.
  size_t size() const;
  // Every communicator alive now, with its members and pending collectives.
  std::vector<CommunicatorStats> Stats() const;
  // One job's communicators: those with a rank in process `pid`, and
  // every communicator sharing a process with one of those (a job's
  // world group holds all its processes). Empty if `pid` is in none.
  std::vector<std::shared_ptr<Communicator>> JobOf(pid_t pid) const;

 private:
  struct Handle {
    std::shared_ptr<Communicator> communicator;
    int rank = 0;
  };
  void LeaveLocked(uint64_t session_id, uint64_t handle,
                   const absl::Status* abort_with)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::shared_ptr<Communicator>> by_id_
      ABSL_GUARDED_BY(mutex_);
  // (session id, handle) -> membership.
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<uint64_t, Handle>>
      by_session_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mutex_) = 1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_COLLECTIVES_COMMUNICATORS_H_
