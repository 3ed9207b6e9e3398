// Client-side bookkeeping of the session's events. The daemon only stamps
// an event slot when its stream reaches the RecordEvent command; whether
// the recorded work is done is answered here from the (stream, sequence)
// of the latest EventRecord, compared with the stream's completion counter.
#ifndef OPENREG_RUNTIME_CLIENT_EVENT_TABLE_H_
#define OPENREG_RUNTIME_CLIENT_EVENT_TABLE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime_client/staging_pool.h"
#include "runtime_client/stream_capture.h"

namespace openreg::client {

struct EventInfo {
  int device = -1;
  bool timing = true;
  // Created with kEventInterprocess: its records are published in the
  // event slot for importers (EventSlot::enqueued_position).
  bool interprocess = false;
  // Opened from another process's handle: waits go through the daemon.
  bool imported = false;
  // Where the latest EventRecord was enqueued; sequence 0 = never recorded.
  StreamPosition recorded;
  // The recording stream was destroyed after finishing: the work is done.
  bool recorded_work_done = false;
  // Where the latest EventRecord was recorded in a capture (capture 0:
  // the latest record was not captured). Such a record orders work inside
  // the capture only; once the capture ended the event counts as never
  // recorded, as a CUDA event recorded during capture does outside it.
  CapturePosition captured;
};

class EventTable {
 public:
  explicit EventTable(uint32_t max_events);

  void Add(uint32_t slot, const EventInfo& info);
  void Remove(uint32_t slot);
  // nullopt when `slot` is not a live event of this session.
  std::optional<EventInfo> Find(uint32_t slot) const;
  void SetRecorded(uint32_t slot, const StreamPosition& position);
  void SetCaptured(uint32_t slot, const CapturePosition& position);
  // See StagingPool::ForgetStream. Returns the interprocess events whose
  // latest record was on the stream.
  std::vector<uint32_t> ForgetStream(uint32_t stream_slot);

 private:
  mutable absl::Mutex mutex_;
  std::vector<std::optional<EventInfo>> events_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_EVENT_TABLE_H_
