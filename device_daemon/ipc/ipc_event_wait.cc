#include "device_daemon/ipc/ipc_event_wait.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "data_plane/session_layout.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/devices/blocking_region.h"

namespace openreg::daemon {
namespace {

// Long waits are cut into slices so that `stop` and the exporter's end are
// noticed promptly.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

bool Reached(const Session& exporter, const IpcEventPosition& position) {
  return position.sequence == 0 ||
         exporter.stream_slot(position.stream_slot)->completed.Load() >=
             position.sequence ||
         // The recording stream was destroyed, which runs its commands
         // first, and its slot started again since.
         exporter.StreamGeneration(position.stream_slot) != position.generation;
}

absl::Status ExporterEnded(const Session& exporter) {
  return MakeError(
      proto::INVALID_HANDLE,
      absl::StrCat("the process that exported this interprocess event (pid ",
                   exporter.pid(),
                   ") ended before the work it recorded in the event "
                   "finished; that work will never complete"));
}

}  // namespace

absl::StatusOr<IpcEventPosition> CaptureIpcEvent(const IpcEventSource& source) {
  const Session& exporter = *source.exporter;
  IpcEventPosition position;
  // A destroyed event has nothing pending: the exporter's EventDestroy
  // waits for its pending record first.
  if (!exporter.HoldsEvent(source.event_slot, source.serial)) return position;
  const uint64_t packed =
      exporter.event_slot(source.event_slot)
          ->enqueued_position.load(std::memory_order_acquire);
  if (packed == 0) return position;
  // The word is client-written: an out-of-range slot is the exporter's
  // corruption, reported rather than followed.
  const uint32_t stream = EventPositionStream(packed);
  if (stream >= exporter.limits().max_streams) {
    return MakeError(
        proto::INVALID_VALUE,
        absl::StrCat("the exporter of this interprocess event (pid ",
                     exporter.pid(), ") published stream slot ", stream,
                     ", beyond its ", exporter.limits().max_streams,
                     " slots: its session memory is corrupt"));
  }
  position.stream_slot = stream;
  position.sequence = EventPositionSequence(packed);
  position.generation = exporter.StreamGeneration(stream);
  if (Reached(exporter, position)) return IpcEventPosition{};
  if (exporter.streams_stopped()) return ExporterEnded(exporter);
  return position;
}

absl::Status AwaitIpcEvent(const IpcEventSource& source,
                           const IpcEventPosition& position,
                           absl::Time deadline, absl::FunctionRef<bool()> stop,
                           absl::FunctionRef<absl::Status()> admit) {
  const Session& exporter = *source.exporter;
  if (position.stream_slot >= exporter.limits().max_streams) {
    return InvalidValueError(absl::StrCat(
        "stream slot ", position.stream_slot, " of the exporter is beyond its ",
        exporter.limits().max_streams, " slots"));
  }
  WaitableCounter& completed =
      exporter.stream_slot(position.stream_slot)->completed;
  // On an executor, a real wait lets the device run its other streams.
  std::optional<BlockingRegion> blocking;
  while (!Reached(exporter, position)) {
    if (!blocking.has_value()) {
      if (absl::Status admitted = admit(); !admitted.ok()) return admitted;
      blocking.emplace();
    }
    if (exporter.streams_stopped()) {
      // The counters are final; look once more past the race with the end.
      if (Reached(exporter, position)) break;
      return ExporterEnded(exporter);
    }
    if (!exporter.closed() && !exporter.IsStreamAlive(position.stream_slot)) {
      if (Reached(exporter, position)) break;
      return MakeError(
          proto::INVALID_HANDLE,
          absl::StrCat("the exporter's stream ", position.stream_slot, " (pid ",
                       exporter.pid(),
                       ") stopped (faulted or destroyed) before completing "
                       "the work recorded in the interprocess event"));
    }
    if (stop()) return absl::CancelledError("stopped while waiting");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return MakeError(proto::NOT_READY,
                       "the work recorded in the interprocess event has "
                       "not finished");
    }
    completed.WaitForAtLeast(position.sequence,
                             std::min(kWaitSlice, deadline - now),
                             DeviceScheduler::WaitSpin());
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
