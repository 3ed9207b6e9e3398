// Waits on events opened from another process's IPC handle. The exporter's
// stream counters live in its own session segment, which this process
// cannot map, so the daemon resolves them (device_daemon/ipc/ipc_event_wait.h):
// each wait captures the exporter's latest record (one round trip), then
// waits on a stream (a WaitIpcEvent command) or on the host (long-polling
// IpcEventWait calls).
#ifndef OPENREG_RUNTIME_CLIENT_IMPORTED_EVENTS_H_
#define OPENREG_RUNTIME_CLIENT_IMPORTED_EVENTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime_client/session.h"

namespace openreg::client {

struct CapturedIpcEvent {
  bool done = false;  // nothing to wait for
  uint32_t stream_slot = 0;
  uint64_t sequence = 0;
  uint64_t generation = 0;
};

// Where the exporter of imported `event` last enqueued a record of it.
absl::StatusOr<CapturedIpcEvent> CaptureImportedEvent(Session& session,
                                                      uint32_t event);

// Blocks the calling thread until `captured` is reached; kSyncTimeout after
// the process's sync timeout, like every synchronizing call.
absl::Status WaitImportedEvent(Session& session, uint32_t event,
                               const CapturedIpcEvent& captured);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_IMPORTED_EVENTS_H_
