// Waiting for another process's interprocess event (an event opened from an
// IPC handle, event_table.h: IpcEventSource).
//
// As cudaStreamWaitEvent and cudaEventSynchronize do, a wait first captures
// where the exporter last enqueued a record of the event (its client
// publishes that position in the event's slot when it enqueues the record),
// then waits for the exporter's stream to complete that position. Later
// records do not move a wait already captured.
//
// Outcomes when the exporter can no longer reach the position are errors,
// never a silent "done": its session ended with the record still pending,
// or its stream stopped (faulted) first. An exporter that destroyed the
// event, or destroyed the recording stream (which ran its commands first),
// has nothing pending.
#ifndef OPENREG_DEVICE_DAEMON_IPC_IPC_EVENT_WAIT_H_
#define OPENREG_DEVICE_DAEMON_IPC_IPC_EVENT_WAIT_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {

struct IpcEventPosition {
  uint32_t stream_slot = 0;  // of the exporter
  uint64_t sequence = 0;     // 0: nothing to wait for
  uint64_t generation = 0;   // Session::StreamGeneration at the capture
};

// The position to wait for: sequence 0 when the recorded work is done or
// nothing was recorded.
absl::StatusOr<IpcEventPosition> CaptureIpcEvent(const IpcEventSource& source);

// Blocks until the exporter completes `position`: OK then; NOT_READY at
// `deadline`; CANCELLED as soon as `stop()` returns true (checked between
// slices of at most 100 ms); an error naming why when it never will.
// `admit` is asked once, before the first real wait (not when the position
// was already reached): its error is returned instead of waiting.
absl::Status AwaitIpcEvent(
    const IpcEventSource& source, const IpcEventPosition& position,
    absl::Time deadline, absl::FunctionRef<bool()> stop,
    absl::FunctionRef<absl::Status()> admit = [] { return absl::OkStatus(); });

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_IPC_IPC_EVENT_WAIT_H_
