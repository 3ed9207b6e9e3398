// What a Session asks of the part that runs its streams (execution/).
//
// A session owns its stream slots and decides when a stream starts and
// stops; the engine runs the commands in the stream's ring. The session
// sees the engine only through this interface, so sessions/ sits below
// execution/ although a session starts its streams: the command executor
// implements StreamEngine and is handed to Session::Create.
//
// Contract: every call here is on the control path (stream create and
// destroy, allocation, session close), never per command.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_ENGINE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_ENGINE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace openreg::daemon {

class Session;

// One stream being run by the engine.
class RunningStream {
 public:
  virtual ~RunningStream() = default;
  // Stop after the command in progress; waits in progress give up.
  virtual void RequestStop() = 0;
  // Stop once the ring is empty (everything already submitted has run).
  virtual void RequestDrainAndStop() = 0;
  // Waits until the stream has stopped. Safe to call from several threads.
  virtual void Join() = 0;
  // Join for at most `timeout`; true when the stream has stopped.
  virtual bool JoinFor(absl::Duration timeout) = 0;
  // The stream has stopped (stopped or faulted).
  virtual bool finished() const = 0;
};

class StreamEngine {
 public:
  virtual ~StreamEngine() = default;
  // Starts running stream `slot` of `session` on `device`. The slot is
  // already reset and marked active; `session` outlives the stream (it
  // Joins it before it goes).
  virtual std::shared_ptr<RunningStream> StartStream(Session* session,
                                                     uint32_t slot,
                                                     int device) = 0;
  // Called by Session::Allocate before it allocates: may refuse (a device
  // out of service, an injected out-of-memory).
  virtual absl::Status AdmitAllocation(Session& session, int device,
                                       uint64_t size) = 0;
  // Called once by Session::Close, after its streams stopped.
  virtual void SessionClosed(uint64_t session_id) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_STREAM_ENGINE_H_
