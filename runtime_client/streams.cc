// Streams (runtime.h). A stream is a slot of the session segment: its id
// is the slot index, and the daemon runs its ring in order. Default streams
// (slot = device index) exist from the start and cannot be destroyed.
#include "absl/strings/str_cat.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::CurrentDevice;
using client::ErrorOf;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

Error StreamCreate(StreamId* stream, int priority) {
  if (stream == nullptr) {
    return ReturnStatus(NullArgumentError("StreamCreate", "stream"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<int> device = session.CurrentDevice();
    if (!device.ok()) return device.status();
    proto::CreateStreamRequest request;
    session.FillRef(request.mutable_session());
    request.set_device(*device);
    request.set_priority(priority);
    proto::CreateStreamReply reply;
    absl::Status created =
        session.Call("CreateStream", &proto::DeviceDaemon::Stub::CreateStream,
                     request, &reply);
    if (!created.ok()) return created;
    if (reply.slot() < static_cast<uint32_t>(session.device_count()) ||
        reply.slot() >= session.limits().max_streams) {
      return MakeError(
          Error::kInternal,
          absl::StrCat("openreg: the daemon created stream slot ", reply.slot(),
                       ", which is not a valid "
                       "non-default slot"));
    }
    session.ActivateStream(reply.slot(), *device);
    *stream = reply.slot();
    return absl::OkStatus();
  }));
}

Error StreamDestroy(StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    absl::Status refused =
        session.RefuseIfCapturing(context, "destroying the stream");
    if (!refused.ok()) return refused;
    if (context.slot < static_cast<uint32_t>(session.device_count())) {
      return MakeError(Error::kInvalidHandle,
                       absl::StrCat("openreg: stream ", context.slot,
                                    " is the default stream of openreg:",
                                    context.slot, " and cannot be destroyed"));
    }
    absl::MutexLock lock(&context.mutex);
    // Finish queued work first (as cudaStreamDestroy does), so that the
    // slot is idle when the daemon reclaims it. A faulted stream is
    // destroyed anyway: that is the way out of it.
    absl::Status waited = session.WaitForCompletion(
        context, context.last_submitted.load(std::memory_order_acquire));
    if (ErrorOf(waited) == Error::kDeviceLost) return waited;
    // Inactive first: no new command fences on it, and once the daemon has
    // freed the slot, another thread's StreamCreate may receive it (a
    // deactivation after that would take that thread's stream away).
    // Then the commands that already fence on it pass.
    const int device = context.device.load(std::memory_order_relaxed);
    session.DeactivateStream(context.slot);
    absl::Status waiters = session.WaitForWaiters(context);
    if (!waiters.ok()) {
      session.ActivateStream(context.slot, device);  // still the caller's
      return waiters;
    }
    proto::DestroyStreamRequest request;
    session.FillRef(request.mutable_session());
    request.set_slot(context.slot);
    proto::DestroyStreamReply reply;
    absl::Status destroyed =
        session.Call("DestroyStream", &proto::DeviceDaemon::Stub::DestroyStream,
                     request, &reply);
    if (!destroyed.ok()) {
      session.ActivateStream(context.slot, device);  // still the caller's
      return destroyed;
    }
    return absl::OkStatus();
  }));
}

Error StreamQuery(StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    absl::Status refused = session.RefuseIfCapturing(context, "StreamQuery");
    if (!refused.ok()) return refused;
    const uint64_t submitted =
        context.last_submitted.load(std::memory_order_acquire);
    if (context.shared->completed.Load() < submitted &&
        !session.IsFaulted(context)) {
      return MakeError(Error::kNotReady,
                       absl::StrCat("openreg: stream ", context.slot,
                                    " has unfinished work"));
    }
    return session.TakeStreamError(context);
  }));
}

Error StreamSynchronize(StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    absl::Status refused =
        session.RefuseIfCapturing(**found, "synchronizing the stream");
    if (!refused.ok()) return refused;
    absl::Status unsafe = client::CheckUnsafeCall("synchronizing a stream");
    if (!unsafe.ok()) return unsafe;
    return session.Synchronize(**found);
  }));
}

Error StreamGetDevice(StreamId stream, int* device) {
  if (device == nullptr) {
    return ReturnStatus(NullArgumentError("StreamGetDevice", "device"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    *device = (*found)->device.load(std::memory_order_relaxed);
    return absl::OkStatus();
  }));
}

Error StreamWaitStream(StreamId waiter, StreamId waitee) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> waiting = session.FindStream(waiter);
    if (!waiting.ok()) return waiting.status();
    absl::StatusOr<StreamContext*> awaited = session.FindStream(waitee);
    if (!awaited.ok()) return awaited.status();
    if (const std::shared_ptr<client::StreamCapture> capture =
            session.CaptureOf(**awaited)) {
      if (*waiting == *awaited) return absl::OkStatus();
      return session.JoinCapture(**waiting,
                                 capture->Position((*awaited)->slot));
    }
    return session.SubmitWait(
        **waiting, {(*awaited)->slot, (*awaited)->last_submitted.load(
                                          std::memory_order_acquire)});
  }));
}

StreamId ResolveStream(StreamId stream) {
  return stream == kDefaultStream ? static_cast<StreamId>(CurrentDevice())
                                  : stream;
}

}  // namespace openreg
