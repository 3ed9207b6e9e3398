#include "runtime_client/imported_events.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime_client/status_util.h"
#include "runtime_client/sync_timeout.h"

namespace openreg::client {
namespace {

// One IpcEventWait call blocks the daemon side at most this long (the
// daemon caps it too), so that the client notices its own sync timeout and
// a lost daemon between calls.
constexpr absl::Duration kWaitCall = absl::Seconds(1);

}  // namespace

absl::StatusOr<CapturedIpcEvent> CaptureImportedEvent(Session& session,
                                                      uint32_t event) {
  proto::IpcEventCaptureRequest request;
  session.FillRef(request.mutable_session());
  request.set_event_slot(event);
  proto::IpcEventCaptureReply reply;
  absl::Status status = session.Call(
      "IpcEventCapture", &proto::DeviceDaemon::Stub::IpcEventCapture, request,
      &reply);
  if (!status.ok()) return status;
  CapturedIpcEvent captured;
  captured.done = reply.done();
  captured.stream_slot = reply.stream_slot();
  captured.sequence = reply.sequence();
  captured.generation = reply.generation();
  return captured;
}

absl::Status WaitImportedEvent(Session& session, uint32_t event,
                               const CapturedIpcEvent& captured) {
  if (captured.done) return absl::OkStatus();
  const absl::Duration timeout = SyncTimeout();
  const absl::Time deadline = absl::Now() + timeout;  // infinite: no limit
  proto::IpcEventWaitRequest request;
  session.FillRef(request.mutable_session());
  request.set_event_slot(event);
  request.set_stream_slot(captured.stream_slot);
  request.set_sequence(captured.sequence);
  request.set_generation(captured.generation);
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return MakeError(
          Error::kSyncTimeout,
          absl::StrCat(
              "openreg: synchronization timed out after ",
              absl::FormatDuration(timeout), " waiting for interprocess event ",
              event,
              " (the exporting process's work has not finished; "
              "OPENREG_SYNC_TIMEOUT, torch.openreg.set_sync_timeout)"));
    }
    request.set_timeout_ms(static_cast<uint32_t>(
        absl::ToInt64Milliseconds(std::min(kWaitCall, left))));
    proto::IpcEventWaitReply reply;
    absl::Status status =
        session.Call("IpcEventWait", &proto::DeviceDaemon::Stub::IpcEventWait,
                     request, &reply);
    if (ErrorOf(status) != Error::kNotReady) return status;
  }
}

}  // namespace openreg::client
