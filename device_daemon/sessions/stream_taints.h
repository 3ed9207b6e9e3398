// The streams of one session that a failed collective tainted.
//
// A collective that fails leaves its outputs unwritten, yet the commands
// queued behind it (on streams that wait for it) were enqueued before the
// client could know: run as if it succeeded, they would compute on stale
// memory and a checkpoint could save the result. On CUDA, NCCL's stream
// would hang instead and its watchdog tear the process down. Here the
// failure travels along the dependency: the failed command taints its
// stream, and a wait for that stream at or past the failed command fails
// with the collective's error (so the waiting stream reports it too, and
// what it runs next is reported as following a failure, never silently).
//
// Contract: thread-safe. A taint lasts until the session leaves the
// communicator (Clear) or the stream slot is reused (ClearSlot); the first
// failure of a stream is kept. Check costs one atomic load when nothing
// is tainted.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_TAINTS_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_TAINTS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace openreg::daemon {

class StreamTaints {
 public:
  // Command `sequence` of stream `slot`, a collective of `communicator`
  // (this session's handle), failed with `why`.
  void Taint(uint32_t slot, uint64_t sequence, uint64_t communicator,
             const absl::Status& why);
  // OK, or the error a wait for stream `slot` up to command `sequence`
  // inherits.
  absl::Status Check(uint32_t slot, uint64_t sequence) const;
  // The session left `communicator`: its failures taint nothing any more.
  // Returns the slots it no longer taints.
  std::vector<uint32_t> Clear(uint64_t communicator);
  // Stream `slot` was freed or started anew.
  void ClearSlot(uint32_t slot);

 private:
  struct Failure {
    uint64_t sequence = 0;
    uint64_t communicator = 0;
    absl::Status why;
  };

  std::atomic<int> count_{0};
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<uint32_t, Failure> by_slot_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_TAINTS_H_
