// The thread behind one stream of one session: reads serialized commands
// from the stream's ring, runs them through the CommandExecutor in order
// and publishes each one's completion. Errors go to the stream's error
// record; a ring the client corrupted (or a gap in sequence numbers) faults
// the stream, which then stops reading. Nothing a client writes can make it
// crash or spin. Kernels wait for a slot of the device's ExecutionGate at
// the stream's priority; other commands run as soon as they are read.
#ifndef OPENREG_DEVICE_DAEMON_STREAM_WORKER_H_
#define OPENREG_DEVICE_DAEMON_STREAM_WORKER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/session_layout.h"

namespace openreg::daemon {

class CommandExecutor;
class ExecutionGate;
class Session;

// Stores the stream's first unreported error: the text fields first, then
// error_code with release order so that the client never sees a code with
// half-written text. Does nothing when an error is already pending.
void RecordStreamError(StreamSlot* slot, uint64_t sequence,
                       absl::string_view op, const absl::Status& status);

class StreamWorker {
 public:
  // Starts the thread. `session` and `executor` must outlive the worker.
  // The stream's priority is read from its slot (set by the session before
  // the worker starts) and clamped to the supported range.
  StreamWorker(Session* session, uint32_t slot, int device,
               CommandExecutor* executor);
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;
  // Stops (without draining) and joins.
  ~StreamWorker();

  // Stop after the command in progress; waits in progress give up.
  void RequestStop();
  // Stop once the ring is empty (everything already submitted has run).
  void RequestDrainAndStop();
  // Waits for the thread to exit. Safe to call from several threads.
  void Join();

  // The thread's loop has ended (stopped or faulted).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  int priority() const { return priority_; }

 private:
  void Run();
  void Fault(uint64_t sequence, const absl::Status& status);

  Session* const session_;
  const uint32_t slot_index_;
  const int device_;
  CommandExecutor* const executor_;
  StreamSlot* const slot_;
  const int priority_;
  ExecutionGate* const gate_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{false};
  std::atomic<bool> finished_{false};
  absl::Mutex join_mutex_;
  std::thread thread_;  // last: started once every other member is ready
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_STREAM_WORKER_H_
