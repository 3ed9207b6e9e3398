#include "runtime_client/session.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_plane/doorbell.h"
#include "data_plane/error_codes.h"
#include "data_plane/spin_wait.h"
#include "runtime_client/command_encoding.h"
#include "runtime_client/command_phase.h"
#include "runtime_client/sync_timeout.h"
#include "runtime_client/thread_state.h"

namespace openreg::client {
namespace {

// A fixed-size text field from shared memory; the daemon is expected to
// NUL-terminate it, but the copy is bounded either way.
template <size_t N>
std::string FieldText(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

}  // namespace

Session::Session(Connection connection)
    : connection_(std::move(connection)),
      view_(connection_.segment.data()),
      limits_(view_.header()->limits),
      device_count_(static_cast<int>(view_.header()->device_count)),
      event_slots_(view_.event(0)),
      liveness_(connection_.attach_socket.get(), connection_.socket_path),
      submitted_slots_((limits_.max_streams + 63) / 64),
      active_slots_((limits_.max_streams + 63) / 64),
      staging_(view_.staging(), limits_.staging_bytes),
      events_(limits_.max_events) {
  streams_.reserve(limits_.max_streams);
  for (uint32_t slot = 0; slot < limits_.max_streams; ++slot) {
    streams_.push_back(std::make_unique<StreamContext>(
        slot, view_.stream(slot), view_.ring_buffer(slot), limits_.ring_bytes,
        view_.reply_area(slot), limits_.max_streams));
  }
  // Stream slot d is device d's default stream, active from the start.
  for (int device = 0; device < device_count_; ++device) {
    ActivateStream(static_cast<uint32_t>(device), device);
  }
}

absl::Status Session::ValidateDevice(int device) const {
  if (device >= 0 && device < device_count_) return absl::OkStatus();
  return MakeError(
      Error::kInvalidDevice,
      // "The device index is out of range": the phrase PyTorch's
      // reference backend uses, which scripts and tests match.
      absl::StrCat("openreg: The device index is out of range: device ", device,
                   " of a daemon with ", device_count_, " openreg device",
                   device_count_ == 1 ? "" : "s"));
}

absl::StatusOr<int> Session::CurrentDevice() const {
  const int device = client::CurrentDevice();
  absl::Status valid = ValidateDevice(device);
  if (!valid.ok()) return valid;
  return device;
}

absl::StatusOr<StreamContext*> Session::FindStream(StreamId stream) {
  if (stream == kDefaultStream) {
    absl::StatusOr<int> device = CurrentDevice();
    if (!device.ok()) return device.status();
    return streams_[*device].get();
  }
  if (stream < streams_.size() &&
      streams_[stream]->active.load(std::memory_order_acquire)) {
    return streams_[stream].get();
  }
  return MakeError(Error::kInvalidHandle,
                   absl::StrCat("openreg: stream ", stream,
                                " is not a live stream of this process "
                                "(never created, or destroyed)"));
}

void Session::ForEachActiveStream(
    int device, absl::FunctionRef<void(StreamContext&)> visit) {
  ForEachActiveStream([device, visit](StreamContext& stream) {
    if (stream.device.load(std::memory_order_relaxed) == device) {
      visit(stream);
    }
  });
}

void Session::ForEachActiveStream(
    absl::FunctionRef<void(StreamContext&)> visit) {
  for (size_t word = 0; word < active_slots_.size(); ++word) {
    uint64_t bits = active_slots_[word].load(std::memory_order_acquire);
    while (bits != 0) {
      const int bit = __builtin_ctzll(bits);
      bits &= bits - 1;
      // The bit is a hint; `active` decides (a slot may be going away).
      StreamContext& stream = *streams_[word * 64 + bit];
      if (stream.active.load(std::memory_order_acquire)) visit(stream);
    }
  }
}

void Session::ForEachSubmittedSlot(
    absl::FunctionRef<void(StreamContext&)> visit) {
  for (size_t word = 0; word < submitted_slots_.size(); ++word) {
    uint64_t bits = submitted_slots_[word].load(std::memory_order_acquire);
    while (bits != 0) {
      const int bit = __builtin_ctzll(bits);
      bits &= bits - 1;
      visit(*streams_[word * 64 + bit]);
    }
  }
}

void Session::ActivateStream(uint32_t slot, int device) {
  StreamContext& stream = *streams_[slot];
  // The daemon expects command sequence numbers to continue from the
  // slot's completion counter (it resets a reused slot to 0 before
  // answering CreateStream); counting from the counter also means a stale
  // value could never make new work look finished.
  stream.last_submitted.store(stream.shared->completed.Load(),
                              std::memory_order_relaxed);
  stream.device.store(device, std::memory_order_relaxed);
  stream.active.store(true, std::memory_order_release);
  active_slots_[slot / 64].fetch_or(uint64_t{1} << (slot % 64),
                                    std::memory_order_release);
}

void Session::DeactivateStream(uint32_t slot) {
  absl::WriterMutexLock fences(&fence_mutex_);
  streams_[slot]->active.store(false, std::memory_order_release);
  active_slots_[slot / 64].fetch_and(~(uint64_t{1} << (slot % 64)),
                                     std::memory_order_release);
  // Its own waits on other streams are gone with it.
  for (const std::unique_ptr<StreamContext>& other : streams_) {
    other->waiters[slot].store(0, std::memory_order_relaxed);
  }
  staging_.ForgetStream(slot);
  // Importers must not wait on a slot that a new stream may reuse; the
  // destroyed stream ran its commands, so nothing is pending.
  for (uint32_t event : events_.ForgetStream(slot)) {
    event_slot(event)->enqueued_position.store(0, std::memory_order_release);
  }
}

bool Session::IsFaulted(const StreamContext& stream) const {
  return stream.shared->state.load(std::memory_order_acquire) ==
         static_cast<uint32_t>(StreamState::kFaulted);
}

absl::Status Session::FaultedError(const StreamContext& stream) const {
  return MakeError(
      Error::kInternal,
      absl::StrCat("openreg: stream ", stream.slot, " on openreg:",
                   stream.device.load(std::memory_order_relaxed),
                   " is faulted: the daemon stopped reading its commands "
                   "after a malformed one; use another stream"));
}

absl::StatusOr<uint64_t> Session::Submit(StreamContext& stream,
                                         Encoder encode) {
  absl::MutexLock lock(&stream.mutex);
  return SubmitLocked(stream, encode);
}

absl::StatusOr<uint64_t> Session::SubmitLocked(StreamContext& stream,
                                               Encoder encode) {
  absl::Status alive = liveness_.Check();
  if (!alive.ok()) return alive;
  if (absl::Status sticky = StickyError(); !sticky.ok()) return sticky;
  if (IsFaulted(stream)) return TakeStreamError(stream);
  if (stream.capture != nullptr) {
    // Recorded, not sent: the returned sequence 0 is "nothing to wait
    // for" to every caller.
    absl::Status recorded = stream.capture->Record(stream.slot, encode);
    if (!recorded.ok()) return recorded;
    return 0;
  }
  const uint64_t sequence =
      stream.last_submitted.load(std::memory_order_relaxed) + 1;
  const absl::string_view payload = encode(sequence);
  if (payload.size() > stream.writer.MaxPayload()) {
    return MakeError(Error::kInvalidValue,
                     absl::StrCat("openreg: a command of ", payload.size(),
                                  " bytes exceeds the stream ring's limit of ",
                                  stream.writer.MaxPayload(),
                                  " bytes (an op over this many tensors: "
                                  "split it into calls over fewer)"));
  }
  // Read only once the ring was found full: most commands never wait, and
  // a clock read is a measurable part of a small op's cost.
  std::optional<absl::Time> deadline;
  const absl::Duration timeout = SyncTimeout();
  while (true) {
    absl::Status written =
        stream.writer.Write(payload.data(), payload.size(), kWaitSlice);
    if (written.ok()) break;
    if (!absl::IsResourceExhausted(written)) {
      return MakeError(Error::kInvalidValue,
                       absl::StrCat("openreg: ", written.message()));
    }
    // Ring full: the daemon is behind, stuck, faulted or dead. The first
    // write already waited one slice for room.
    if (!deadline.has_value()) {
      deadline = absl::Now() - kWaitSlice + timeout;  // infinite: no limit
    }
    absl::Status probe = liveness_.Probe();
    if (!probe.ok()) return probe;
    if (IsFaulted(stream)) return TakeStreamError(stream);
    if (absl::Now() >= *deadline) {
      return SyncTimeoutError(
          stream,
          absl::StrCat("waited for room in its command ring for command ",
                       sequence),
          timeout);
    }
  }
  stream.last_submitted.store(sequence, std::memory_order_release);
  std::atomic<uint64_t>& submitted = submitted_slots_[stream.slot / 64];
  const uint64_t bit = uint64_t{1} << (stream.slot % 64);
  // A load first: after a slot's first command this is all a submit costs.
  if ((submitted.load(std::memory_order_relaxed) & bit) == 0) {
    submitted.fetch_or(bit, std::memory_order_release);
  }
  // The ring's tail is published (seq_cst); a stream the daemon parked
  // needs its device's doorbell (data_plane/doorbell.h).
  if (ClaimParked(&stream.shared->parked)) {
    RingDoorbell(
        &DeviceDoorbell(stream),
        connection_.ring_fds[stream.device.load(std::memory_order_relaxed)]
            .get());
  }
  return sequence;
}

absl::StatusOr<uint64_t> Session::SubmitCommand(StreamContext& stream,
                                                proto::Command* command) {
  return Submit(stream, [command](uint64_t sequence) {
    command->set_sequence(sequence);
    command->set_phase(static_cast<proto::CommandPhase>(ThreadCommandPhase()));
    command->set_correlation_id(ThreadCorrelationId());
    return EncodeCommand(*command);
  });
}

std::shared_ptr<StreamCapture> Session::CaptureOf(StreamContext& stream) {
  if (stream.capture_id.load(std::memory_order_acquire) == 0) return nullptr;
  absl::MutexLock lock(&stream.mutex);
  return stream.capture;
}

absl::Status Session::RefuseIfCapturing(StreamContext& stream,
                                        absl::string_view call) {
  const std::shared_ptr<StreamCapture> capture = CaptureOf(stream);
  if (capture == nullptr) return absl::OkStatus();
  return RefuseOnCapturingStream(*capture, stream.slot, call);
}

bool Session::IsCaptureActive(const CapturePosition& position) {
  return position.capture != 0 &&
         streams_[position.slot]->capture_id.load(std::memory_order_acquire) ==
             position.capture;
}

absl::Status Session::JoinCapture(StreamContext& waiter,
                                  const CapturePosition& awaited) {
  const std::shared_ptr<StreamCapture> capture =
      CaptureOf(*streams_[awaited.slot]);
  if (capture == nullptr || capture->id() != awaited.capture) {
    return absl::OkStatus();  // that capture ended meanwhile
  }
  {
    absl::MutexLock lock(&waiter.mutex);
    if (waiter.capture != nullptr && waiter.capture != capture) {
      const absl::Status error = MakeError(
          Error::kStreamCaptureInvalidated,
          absl::StrCat("openreg: stream ", waiter.slot,
                       " cannot wait for work of another capture (stream ",
                       awaited.slot,
                       "'s) while it captures: two captures "
                       "cannot be merged"));
      waiter.capture->Invalidate(error);
      capture->Invalidate(error);
      return error;
    }
    if (waiter.capture == nullptr) {
      const int device = waiter.device.load(std::memory_order_relaxed);
      if (device != capture->device()) {
        const absl::Status error = MakeError(
            Error::kStreamCaptureInvalidated,
            absl::StrCat(
                "openreg: stream ", waiter.slot, " of openreg:", device,
                " cannot join a capture on openreg:", capture->device(),
                " (a graph runs on one device)"));
        capture->Invalidate(error);
        return error;
      }
      if (waiter.slot < static_cast<uint32_t>(device_count_)) {
        const absl::Status error = MakeError(
            Error::kStreamCaptureUnsupported,
            absl::StrCat("openreg: operation not permitted when stream is "
                         "capturing: the default stream of openreg:",
                         device, " cannot join a capture"));
        capture->Invalidate(error);
        return error;
      }
      waiter.capture = capture;
      waiter.capture_id.store(capture->id(), std::memory_order_release);
      capture->AddLane(waiter.slot);
    }
  }
  capture->NoteWait(waiter.slot, awaited);
  return absl::OkStatus();
}

absl::Status Session::SubmitWait(StreamContext& waiter,
                                 const StreamPosition& awaited) {
  if (awaited.slot == waiter.slot ||
      (IsFinished(awaited) && !IsTainted(awaited))) {
    return absl::OkStatus();
  }
  if (const std::shared_ptr<StreamCapture> capture = CaptureOf(waiter)) {
    // Replays may come at any time: a wait for work outside the capture
    // would order only this moment's work (cudaErrorStreamCaptureIsolation).
    const absl::Status error = MakeError(
        Error::kStreamCaptureInvalidated,
        absl::StrCat("openreg: operation not permitted when stream is "
                     "capturing: stream ",
                     waiter.slot, " would wait for unfinished work of stream ",
                     awaited.slot,
                     " from outside its capture (make it wait "
                     "before the capture begins)"));
    capture->Invalidate(error);
    return error;
  }
  proto::Command command;
  command.mutable_wait_stream()->set_stream_slot(awaited.slot);
  command.mutable_wait_stream()->set_sequence(awaited.sequence);
  absl::StatusOr<uint64_t> sequence = SubmitCommand(waiter, &command);
  if (!sequence.ok()) return sequence.status();
  NoteWaiter(awaited.slot, {waiter.slot, *sequence});
  return absl::OkStatus();
}

void Session::NoteWaiter(uint32_t awaited_slot, const StreamPosition& waiter) {
  std::atomic<uint64_t>& last = streams_[awaited_slot]->waiters[waiter.slot];
  uint64_t previous = last.load(std::memory_order_relaxed);
  while (previous < waiter.sequence &&
         !last.compare_exchange_weak(previous, waiter.sequence,
                                     std::memory_order_relaxed)) {
  }
}

absl::Status Session::WaitForWaiters(StreamContext& stream) {
  for (uint32_t slot = 0; slot < limits_.max_streams; ++slot) {
    const uint64_t sequence =
        stream.waiters[slot].load(std::memory_order_relaxed);
    if (sequence == 0) continue;
    StreamContext& waiter = *streams_[slot];
    if (waiter.active.load(std::memory_order_acquire)) {
      absl::Status waited = WaitForCompletion(waiter, sequence);
      if (ErrorOf(waited) == Error::kDeviceLost) return waited;
    }
    stream.waiters[slot].store(0, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

Doorbell& Session::DeviceDoorbell(const StreamContext& stream) const {
  return static_cast<DoorbellPage*>(connection_.doorbells.data())
      ->devices[stream.device.load(std::memory_order_relaxed)];
}

absl::Status Session::WaitForCompletion(StreamContext& stream,
                                        uint64_t sequence) {
  WaitableCounter& completed = stream.shared->completed;
  const absl::Duration timeout = SyncTimeout();
  const absl::Time deadline = absl::Now() + timeout;  // infinite: no limit
  while (completed.Load() < sequence) {
    if (IsFaulted(stream)) return TakeStreamError(stream);
    const absl::Duration left = deadline - absl::Now();
    const absl::Duration spin = ShouldSpinBeforeSleeping(DeviceDoorbell(stream))
                                    ? kSpinBeforeSleep
                                    : absl::ZeroDuration();
    if (completed.WaitForAtLeast(sequence, std::min(kWaitSlice, left), spin)) {
      break;
    }
    if (absl::Now() >= deadline) {
      return SyncTimeoutError(
          stream, absl::StrCat("was waited on for command ", sequence),
          timeout);
    }
    absl::Status probe = liveness_.Probe();
    if (!probe.ok()) return probe;
  }
  return absl::OkStatus();
}

absl::Status Session::SyncTimeoutError(const StreamContext& stream,
                                       absl::string_view waiting_for,
                                       absl::Duration timeout) const {
  return MakeError(
      Error::kSyncTimeout,
      absl::StrCat(
          "openreg: synchronization timed out after ",
          absl::FormatDuration(timeout), ": stream ", stream.slot,
          " on openreg:", stream.device.load(std::memory_order_relaxed),
          " has completed command ", stream.shared->completed.Load(), " and ",
          waiting_for,
          " (the device hangs, or its work takes longer than the sync "
          "timeout: OPENREG_SYNC_TIMEOUT, torch.openreg.set_sync_timeout)"));
}

absl::Status Session::TakeStreamError(StreamContext& stream) {
  StreamSlot* shared = stream.shared;
  uint32_t code = shared->error_code.load(std::memory_order_acquire);
  if (code == 0) {
    return IsFaulted(stream) ? FaultedError(stream) : absl::OkStatus();
  }
  // The daemon wrote the text before publishing the code (release), and
  // writes nothing new until the code is cleared, so the copy is stable.
  const std::string op = FieldText(shared->error_op);
  const std::string message = FieldText(shared->error_message);
  const uint64_t sequence = shared->error_sequence;
  shared->error_code.compare_exchange_strong(code, 0,
                                             std::memory_order_acq_rel);
  // A code outside the table (a corrupted record) is a kernel failure.
  const bool known = proto::ErrorCode_IsValid(static_cast<int>(code));
  const Error error = known ? static_cast<Error>(code) : Error::kKernelFailure;
  // The original message first (so that it reads, and matches, as the
  // same error would on CPU), then where and when it happened.
  return MakeError(
      error, absl::StrCat(message, " (openreg: ", op.empty() ? "a command" : op,
                          " failed on openreg:",
                          stream.device.load(std::memory_order_relaxed),
                          ", command ", sequence, " of its stream)"));
}

absl::Status Session::Synchronize(StreamContext& stream) {
  absl::Status waited = WaitForCompletion(
      stream, stream.last_submitted.load(std::memory_order_acquire));
  if (!waited.ok()) return waited;
  return TakeStreamError(stream);
}

absl::Status Session::WaitForDevice(int device) {
  std::vector<StreamContext*> streams;
  ForEachActiveStream(device, [&streams](StreamContext& stream) {
    streams.push_back(&stream);
  });
  for (StreamContext* stream : streams) {
    absl::Status waited = WaitForCompletion(
        *stream, stream->last_submitted.load(std::memory_order_acquire));
    if (!waited.ok()) return waited;
  }
  return absl::OkStatus();
}

bool Session::IsTainted(const StreamPosition& position) const {
  const uint64_t tainted = streams_[position.slot]->shared->tainted_at.load(
      std::memory_order_acquire);
  return tainted != 0 && tainted <= position.sequence;
}

bool Session::IsFinished(const StreamPosition& position) const {
  if (position.sequence == 0) return true;
  const StreamContext& stream = *streams_[position.slot];
  // A faulted stream will never run the command: the chunk is free.
  return stream.shared->completed.Load() >= position.sequence ||
         IsFaulted(stream);
}

absl::StatusOr<std::optional<StagingChunk>> Session::AcquireStagingChunk(
    bool wait_for_chunk) {
  auto finished = [this](const StreamPosition& position) {
    return IsFinished(position);
  };
  std::optional<StagingChunk> chunk;
  while (true) {
    chunk = staging_.Reserve(
        finished, wait_for_chunk ? kWaitSlice : absl::ZeroDuration());
    if (chunk.has_value()) break;
    if (!wait_for_chunk) return std::optional<StagingChunk>();
    absl::Status probe = liveness_.Probe();
    if (!probe.ok()) return probe;
  }
  // The daemon may still be reading or writing the chunk for its last
  // command; wait until that command is done.
  const StreamPosition last_use = chunk->last_use;
  while (!IsFinished(last_use)) {
    streams_[last_use.slot]->shared->completed.WaitForAtLeast(last_use.sequence,
                                                              kWaitSlice);
    absl::Status probe = liveness_.Probe();
    if (!probe.ok()) {
      staging_.Release(chunk->index, last_use);
      return probe;
    }
  }
  return chunk;
}

absl::Status Session::TransportError(absl::string_view rpc_name,
                                     const grpc::Status& status) {
  if (liveness_.ConfirmLost()) return liveness_.Check();
  return MakeError(
      Error::kDaemonUnavailable,
      absl::StrCat("openreg: the ", rpc_name, " call to the daemon on ",
                   socket_path(), " failed: ", status.error_message()));
}

absl::Status Session::Detach() {
  absl::Status result;
  if (!liveness_.lost()) {
    proto::DetachRequest request;
    FillRef(request.mutable_session());
    proto::DetachReply reply;
    result =
        Call("Detach", &proto::DeviceDaemon::Stub::Detach, request, &reply);
  }
  liveness_.MarkDetached();
  return result;
}

absl::Status Session::StickyError() const {
  std::string message;
  const uint32_t code = ReadStickyError(view_.header(), &message);
  if (code == 0) return absl::OkStatus();
  return MakeError(static_cast<Error>(ErrorInfo(static_cast<int>(code)).code),
                   absl::StrCat("openreg: ", message));
}

}  // namespace openreg::client
