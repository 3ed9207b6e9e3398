// One attached session with the daemon: the control-plane stub, the
// mapped session segment and the client-side state of its streams, events
// and staging area. Everything the public API does goes through a Session;
// Client (client.h) owns the process's current one.
#ifndef OPENREG_RUNTIME_CLIENT_SESSION_H_
#define OPENREG_RUNTIME_CLIENT_SESSION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_plane/doorbell.h"
#include "data_plane/session_layout.h"
#include "openreg/runtime.h"
#include "protos/commands.pb.h"
#include "protos/control.grpc.pb.h"
#include "runtime_client/connection.h"
#include "runtime_client/daemon_liveness.h"
#include "runtime_client/event_table.h"
#include "runtime_client/freed_addresses.h"
#include "runtime_client/staging_pool.h"
#include "runtime_client/status_util.h"
#include "runtime_client/stream_context.h"

namespace openreg::client {

// Waits on shared-memory counters are cut into slices of this length;
// between slices the client checks that the daemon is still alive, so no
// wait outlives the daemon by more than a slice.
inline constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

class Session {
 public:
  explicit Session(Connection connection);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& socket_path() const { return connection_.socket_path; }
  int device_count() const { return device_count_; }
  const SessionLimits& limits() const { return limits_; }
  // Pointers below were computed once from the validated header, so a
  // later change of the shared header can never redirect them.
  EventSlot* event_slot(uint32_t slot) const { return event_slots_ + slot; }
  StagingPool& staging() { return staging_; }
  EventTable& events() { return events_; }
  FreedAddresses& freed_addresses() { return freed_addresses_; }

  // kDeviceLost once the daemon is gone (sticky); see DaemonLiveness.
  absl::Status CheckAlive() { return liveness_.Check(); }
  // The session's sticky error (an injected illegal address or ECC error
  // the daemon published in the segment header), else OK. Every submit
  // checks it, so every later call fails at the call.
  absl::Status StickyError() const;

  // ---- Devices
  // kInvalidDevice (with the daemon's device count) when out of range.
  absl::Status ValidateDevice(int device) const;
  // The calling thread's current device, validated.
  absl::StatusOr<int> CurrentDevice() const;

  // ---- Streams
  // Resolves kDefaultStream and checks that `stream` is a live stream of
  // this session (kInvalidHandle otherwise).
  absl::StatusOr<StreamContext*> FindStream(StreamId stream);
  StreamContext& DefaultStream(int device) { return *streams_[device]; }
  StreamContext& StreamAt(uint32_t slot) { return *streams_[slot]; }
  // Calls `visit` for every live stream of `device`.
  void ForEachActiveStream(int device,
                           absl::FunctionRef<void(StreamContext&)> visit);
  // Every active stream of every device.
  void ForEachActiveStream(absl::FunctionRef<void(StreamContext&)> visit);
  // Every stream slot this session ever submitted a command to: only their
  // mailboxes can hold kernel warnings, so a scan after each synchronizing
  // call need not read the other slots (64 by default).
  void ForEachSubmittedSlot(absl::FunctionRef<void(StreamContext&)> visit);
  // Starts client-side tracking of a stream the daemon just created.
  void ActivateStream(uint32_t slot, int device);
  // Takes fence_mutex() exclusively: once it returns, every command that
  // fences on the stream has been noted (WaitForWaiters sees it) and no
  // new one can be built.
  void DeactivateStream(uint32_t slot);
  // Held shared while a command that fences on other streams (a free) is
  // built from the active streams, submitted and its waiters noted.
  absl::Mutex& fence_mutex() { return fence_mutex_; }

  // Appends a command to `stream`'s ring; `encode` serializes it given its
  // sequence number. Waits while the ring is full (checking liveness).
  // Returns the command's sequence number.
  using Encoder = absl::FunctionRef<absl::string_view(uint64_t sequence)>;
  absl::StatusOr<uint64_t> Submit(StreamContext& stream, Encoder encode);
  absl::StatusOr<uint64_t> SubmitLocked(StreamContext& stream, Encoder encode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream.mutex);
  // Submit for a Command whose body is set; fills in its sequence.
  absl::StatusOr<uint64_t> SubmitCommand(StreamContext& stream,
                                         proto::Command* command);

  // ---- Stream capture (openreg/graphs.h)
  // The capture `stream` records into, or null.
  std::shared_ptr<StreamCapture> CaptureOf(StreamContext& stream);
  // kStreamCaptureUnsupported (invalidating the capture) when `stream` is
  // capturing: `call` needs its work done now.
  absl::Status RefuseIfCapturing(StreamContext& stream, absl::string_view call);
  // True while the capture `position` was recorded in is still going on.
  bool IsCaptureActive(const CapturePosition& position);
  // `waiter` waits for `awaited`, a position in a capture: it joins that
  // capture (when not capturing) and the wait orders the capture's work.
  absl::Status JoinCapture(StreamContext& waiter,
                           const CapturePosition& awaited);

  // Enqueues on `waiter` a wait for `awaited` (nothing when it has already
  // finished or is on `waiter` itself) and notes the dependency.
  absl::Status SubmitWait(StreamContext& waiter, const StreamPosition& awaited);
  // Records that command `waiter` waits for stream `awaited_slot`.
  void NoteWaiter(uint32_t awaited_slot, const StreamPosition& waiter);
  // Waits until every command noted as waiting for `stream` has run.
  absl::Status WaitForWaiters(StreamContext& stream);

  // Waits until `stream` completed `sequence`. Fails with kDeviceLost when
  // the daemon dies, or with the stream's error when it is faulted.
  // Gives up with kSyncTimeout after SyncTimeout() (sync_timeout.h).
  absl::Status WaitForCompletion(StreamContext& stream, uint64_t sequence);
  // The doorbell of the stream's device in the daemon's doorbell page.
  Doorbell& DeviceDoorbell(const StreamContext& stream) const;
  // Reports (and clears) the first unreported error of `stream`: the
  // recorded code (kKernelFailure when unknown) with "openreg: <op> failed
  // on openreg:<device>: <message>". A faulted stream always reports.
  absl::Status TakeStreamError(StreamContext& stream);
  // Waits for everything submitted to `stream`, then TakeStreamError.
  absl::Status Synchronize(StreamContext& stream);
  // Waits for every live stream of `device` without consuming their error
  // records (for internal waits such as the out-of-memory retry).
  absl::Status WaitForDevice(int device);
  bool IsFinished(const StreamPosition& position) const;
  // A collective at or before `position` failed on its stream: a wait for
  // it must reach the daemon, which fails it (stream_taints.h), even when
  // the work is finished.
  bool IsTainted(const StreamPosition& position) const;
  // The daemon stopped reading this stream's ring (corrupt input).
  bool IsFaulted(const StreamContext& stream) const;

  // Reserves a staging chunk whose previous use has completed. With
  // `wait_for_chunk` false, returns nullopt at once when every chunk is
  // held by some thread (callers already holding one must not block: that
  // could deadlock with other such callers).
  absl::StatusOr<std::optional<StagingChunk>> AcquireStagingChunk(
      bool wait_for_chunk);

  // A control-plane RPC with the standard deadline. Transport failures
  // become kDaemonUnavailable (or kDeviceLost if the daemon died); the
  // reply's status becomes the result.
  template <typename Request, typename Reply>
  absl::Status Call(absl::string_view rpc_name,
                    grpc::Status (proto::DeviceDaemon::Stub::*method)(
                        grpc::ClientContext*, const Request&, Reply*),
                    const Request& request, Reply* reply) {
    absl::Status alive = liveness_.Check();
    if (!alive.ok()) return alive;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(kRpcDeadline));
    const grpc::Status status =
        (connection_.stub.get()->*method)(&context, request, reply);
    if (!status.ok()) return TransportError(rpc_name, status);
    return StatusFromProto(reply->status());
  }
  // Fills the session reference every session-scoped request carries.
  void FillRef(proto::SessionRef* ref) const { *ref = connection_.session; }

  // Detaches from the daemon (its memory is freed there). Threads still
  // using this object afterwards get errors, never a dangling mapping: the
  // segment stays mapped until the last reference is dropped.
  absl::Status Detach();

 private:
  // kSyncTimeout: "... stream S on openreg:D has completed command C and
  // <waiting_for> ...".
  absl::Status SyncTimeoutError(const StreamContext& stream,
                                absl::string_view waiting_for,
                                absl::Duration timeout) const;
  absl::Status TransportError(absl::string_view rpc_name,
                              const grpc::Status& status);
  absl::Status FaultedError(const StreamContext& stream) const;

  Connection connection_;
  const SessionView view_;
  const SessionLimits limits_;
  const int device_count_;
  EventSlot* const event_slots_;
  DaemonLiveness liveness_;
  std::vector<std::unique_ptr<StreamContext>> streams_;
  // A bit per stream slot, set by its first submit (never cleared: a slot
  // reused by another stream is at worst scanned for nothing).
  std::vector<std::atomic<uint64_t>> submitted_slots_;
  // A bit per active stream slot, so that a device synchronize reads only
  // its live streams' contexts, not every slot's (64 by default): each is
  // a separate allocation, cold after a switch between processes
  // (docs/ARCHITECTURE.md, "What the host itself loses at 64").
  std::vector<std::atomic<uint64_t>> active_slots_;
  StagingPool staging_;
  EventTable events_;
  FreedAddresses freed_addresses_;
  absl::Mutex fence_mutex_;
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_SESSION_H_
