// Events (runtime.h). The daemon owns the event slots and stamps them when
// a stream reaches RecordEvent; the client remembers where each event was
// last recorded (stream, sequence) and answers queries from the stream's
// completion counter, without a round trip.
#include "absl/strings/str_cat.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/imported_events.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::ErrorOf;
using client::EventInfo;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

namespace {

absl::StatusOr<EventInfo> FindEvent(Session& session, EventId event) {
  std::optional<EventInfo> info = session.events().Find(event);
  if (!info.has_value()) {
    return MakeError(Error::kInvalidHandle,
                     absl::StrCat("openreg: event ", event,
                                  " is not a live event of this process "
                                  "(never created, or destroyed)"));
  }
  return *info;
}

// Never recorded, or the recorded work has finished.
bool RecordedWorkDone(Session& session, const EventInfo& info) {
  return info.recorded_work_done || session.IsFinished(info.recorded);
}

// The stream waits (on the device) for the exporter's latest record as of
// now.
absl::Status SubmitImportedWait(Session& session, StreamContext& stream,
                                EventId event) {
  absl::StatusOr<client::CapturedIpcEvent> captured =
      client::CaptureImportedEvent(session, event);
  if (!captured.ok()) return captured.status();
  if (captured->done) return absl::OkStatus();
  proto::Command command;
  proto::WaitIpcEvent* wait = command.mutable_wait_ipc_event();
  wait->set_event_slot(event);
  wait->set_stream_slot(captured->stream_slot);
  wait->set_sequence(captured->sequence);
  wait->set_generation(captured->generation);
  absl::StatusOr<uint64_t> sequence = session.SubmitCommand(stream, &command);
  return sequence.status();
}

// An event recorded in a capture that is still going on has no work to
// answer for yet. The capture itself is unaffected (the event may still
// order its streams), so it is not invalidated.
absl::Status CapturedEventError(EventId event,
                                const client::CapturePosition& captured,
                                absl::string_view what) {
  return MakeError(
      Error::kStreamCaptureUnsupported,
      absl::StrCat("openreg: operation not permitted when stream is "
                   "capturing: event ",
                   event, " was recorded in the capture of stream ",
                   captured.slot, " and cannot be ", what,
                   " until the capture ends"));
}

}  // namespace

Error EventCreate(EventId* event, unsigned flags) {
  if (event == nullptr) {
    return ReturnStatus(NullArgumentError("EventCreate", "event"));
  }
  if ((flags & ~(kEventDisableTiming | kEventInterprocess)) != 0) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue,
                  absl::StrCat("openreg: EventCreate: unknown flags ", flags)));
  }
  const bool interprocess = (flags & kEventInterprocess) != 0;
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<int> device = session.CurrentDevice();
    if (!device.ok()) return device.status();
    const bool timing = (flags & kEventDisableTiming) == 0;
    proto::CreateEventRequest request;
    session.FillRef(request.mutable_session());
    request.set_device(*device);
    request.set_enable_timing(timing);
    request.set_interprocess(interprocess);
    proto::CreateEventReply reply;
    absl::Status created =
        session.Call("CreateEvent", &proto::DeviceDaemon::Stub::CreateEvent,
                     request, &reply);
    if (!created.ok()) return created;
    if (reply.slot() >= session.limits().max_events) {
      return MakeError(Error::kInternal,
                       absl::StrCat("openreg: the daemon created event slot ",
                                    reply.slot(), ", beyond the session's ",
                                    session.limits().max_events, " slots"));
    }
    EventInfo added;
    added.device = *device;
    added.timing = timing;
    added.interprocess = interprocess;
    session.events().Add(reply.slot(), added);
    *event = reply.slot();
    return absl::OkStatus();
  }));
}

Error EventDestroy(EventId event) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<EventInfo> info = FindEvent(session, event);
    if (!info.ok()) return info.status();
    // Let a pending RecordEvent run first, so that the daemon never stamps
    // a slot that has been freed (or handed to a new event), and so that
    // importers of an interprocess event have nothing pending once it is
    // gone.
    if (!RecordedWorkDone(session, *info)) {
      absl::Status waited = session.WaitForCompletion(
          session.StreamAt(info->recorded.slot), info->recorded.sequence);
      if (ErrorOf(waited) == Error::kDeviceLost) return waited;
    }
    proto::DestroyEventRequest request;
    session.FillRef(request.mutable_session());
    request.set_slot(event);
    proto::DestroyEventReply reply;
    absl::Status destroyed =
        session.Call("DestroyEvent", &proto::DeviceDaemon::Stub::DestroyEvent,
                     request, &reply);
    if (!destroyed.ok()) return destroyed;
    session.events().Remove(event);
    return absl::OkStatus();
  }));
}

Error EventRecord(EventId event, StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<EventInfo> info = FindEvent(session, event);
    if (!info.ok()) return info.status();
    if (info->imported) {
      return MakeError(
          Error::kInvalidValue,
          absl::StrCat("openreg: EventRecord: event ", event,
                       " was opened from another process's IPC handle and "
                       "cannot be recorded here; record an interprocess "
                       "event of this process and share its handle"));
    }
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    const int stream_device =
        (*context)->device.load(std::memory_order_relaxed);
    if (stream_device != info->device) {
      return MakeError(
          Error::kInvalidHandle,
          absl::StrCat("openreg: EventRecord: event ", event,
                       " belongs to openreg:", info->device, " but stream ",
                       (*context)->slot, " to openreg:", stream_device));
    }
    if (const std::shared_ptr<client::StreamCapture> capture =
            session.CaptureOf(**context)) {
      if (info->interprocess) {
        return client::RefuseOnCapturingStream(
            *capture, (*context)->slot, "recording an interprocess event");
      }
      // Orders work inside the capture only: nothing is recorded.
      session.events().SetCaptured(event, capture->Position((*context)->slot));
      return absl::OkStatus();
    }
    proto::Command command;
    command.mutable_record_event()->set_event_slot(event);
    absl::StatusOr<uint64_t> sequence =
        session.SubmitCommand(**context, &command);
    if (!sequence.ok()) return sequence.status();
    session.events().SetRecorded(event, {(*context)->slot, *sequence});
    if (info->interprocess) {
      // Published after the command is in the ring: a process that learns
      // of the record (from this process, after this call) sees it.
      session.event_slot(event)->enqueued_position.store(
          PackEventPosition((*context)->slot, *sequence),
          std::memory_order_release);
    }
    return absl::OkStatus();
  }));
}

Error EventQuery(EventId event) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<EventInfo> info = FindEvent(session, event);
    if (!info.ok()) return info.status();
    if (info->imported) {
      absl::StatusOr<client::CapturedIpcEvent> captured =
          client::CaptureImportedEvent(session, event);
      if (!captured.ok()) return captured.status();
      if (captured->done) return absl::OkStatus();
      return MakeError(
          Error::kNotReady,
          absl::StrCat("openreg: the work recorded by interprocess event ",
                       event, " has not finished"));
    }
    if (session.IsCaptureActive(info->captured)) {
      return CapturedEventError(event, info->captured, "queried");
    }
    if (RecordedWorkDone(session, *info)) return absl::OkStatus();
    StreamContext& stream = session.StreamAt(info->recorded.slot);
    // A faulted stream never gets there: report why instead of "not ready"
    // forever.
    if (session.IsFaulted(stream)) return session.TakeStreamError(stream);
    return MakeError(Error::kNotReady,
                     absl::StrCat("openreg: the work recorded by event ", event,
                                  " has not finished"));
  }));
}

Error EventSynchronize(EventId event) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<EventInfo> info = FindEvent(session, event);
    if (!info.ok()) return info.status();
    if (info->imported) {
      absl::StatusOr<client::CapturedIpcEvent> captured =
          client::CaptureImportedEvent(session, event);
      if (!captured.ok()) return captured.status();
      return client::WaitImportedEvent(session, event, *captured);
    }
    if (session.IsCaptureActive(info->captured)) {
      return CapturedEventError(event, info->captured, "synchronized");
    }
    if (info->recorded.sequence == 0 || info->recorded_work_done) {
      return absl::OkStatus();
    }
    absl::Status unsafe = client::CheckUnsafeCall("synchronizing an event");
    if (!unsafe.ok()) return unsafe;
    StreamContext& stream = session.StreamAt(info->recorded.slot);
    absl::Status waited =
        session.WaitForCompletion(stream, info->recorded.sequence);
    if (!waited.ok()) return waited;
    return session.TakeStreamError(stream);
  }));
}

Error StreamWaitEvent(StreamId stream, EventId event) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    absl::StatusOr<EventInfo> info = FindEvent(session, event);
    if (!info.ok()) return info.status();
    if (info->imported) {
      absl::Status refused = session.RefuseIfCapturing(
          **context, "waiting for an interprocess event");
      if (!refused.ok()) return refused;
      return SubmitImportedWait(session, **context, event);
    }
    if (session.IsCaptureActive(info->captured)) {
      return session.JoinCapture(**context, info->captured);
    }
    // Nothing to wait for when never recorded or already done (SubmitWait
    // also skips a record on this very stream, which runs in order).
    if (RecordedWorkDone(session, *info) &&
        !session.IsTainted(info->recorded)) {
      return absl::OkStatus();
    }
    return session.SubmitWait(**context, info->recorded);
  }));
}

Error EventElapsedTime(float* milliseconds, EventId start, EventId end) {
  if (milliseconds == nullptr) {
    return ReturnStatus(NullArgumentError("EventElapsedTime", "milliseconds"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<EventInfo> start_info = FindEvent(session, start);
    if (!start_info.ok()) return start_info.status();
    absl::StatusOr<EventInfo> end_info = FindEvent(session, end);
    if (!end_info.ok()) return end_info.status();
    if (!start_info->timing || !end_info->timing) {
      return MakeError(Error::kInvalidHandle,
                       absl::StrCat("openreg: EventElapsedTime: event ",
                                    start_info->timing ? end : start,
                                    " was created with kEventDisableTiming"));
    }
    if (start_info->recorded.sequence == 0 ||
        end_info->recorded.sequence == 0) {
      return MakeError(
          Error::kInvalidValue,
          absl::StrCat("openreg: EventElapsedTime: event ",
                       start_info->recorded.sequence == 0 ? start : end,
                       " has not been recorded"));
    }
    if (!RecordedWorkDone(session, *start_info) ||
        !RecordedWorkDone(session, *end_info)) {
      return MakeError(Error::kNotReady,
                       "openreg: EventElapsedTime: the recorded work has "
                       "not finished");
    }
    // Stamped by the daemon (CLOCK_MONOTONIC) before it completed the
    // RecordEvent commands, which the completion checks above acquired.
    const int64_t start_ns =
        static_cast<int64_t>(session.event_slot(start)->timestamp_ns.load(
            std::memory_order_acquire));
    const int64_t end_ns = static_cast<int64_t>(
        session.event_slot(end)->timestamp_ns.load(std::memory_order_acquire));
    *milliseconds =
        static_cast<float>(static_cast<double>(end_ns - start_ns) / 1e6);
    return absl::OkStatus();
  }));
}

}  // namespace openreg
