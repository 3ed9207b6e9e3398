// One session's shared-memory segment as the daemon sees it: created
// zero-filled with its header written, then addressed only through the
// daemon's private copy of the layout. The segment is writable by the
// client, so the daemon never trusts the SessionHeader in it: slot and area
// pointers are computed from `layout()`, not via SessionView.
//
// Contract: owns the mapping; every pointer it hands out stays valid while
// it lives. It does no locking: the words it points to are shared with the
// client, and session_layout.h says who writes which and how.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_SEGMENT_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_SEGMENT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "data_plane/session_layout.h"
#include "data_plane/shared_memory.h"

namespace openreg::daemon {

class SessionSegment {
 public:
  // Creates and maps the segment of session `session_id` for `limits` and
  // `device_count` devices, and writes its header.
  static absl::StatusOr<SessionSegment> Create(const SessionLimits& limits,
                                               uint32_t device_count,
                                               uint64_t session_id);

  SessionSegment(SessionSegment&&) = default;
  SessionSegment& operator=(SessionSegment&&) = default;

  const SharedMemory& memory() const { return memory_; }
  // The daemon's trusted copy of the segment layout.
  const SessionHeader& layout() const { return layout_; }
  // The header in the segment, to publish to the client (never read back).
  SessionHeader* header() const {
    return reinterpret_cast<SessionHeader*>(base_);
  }
  StreamSlot* stream_slot(uint32_t slot) const;
  EventSlot* event_slot(uint32_t slot) const;
  char* ring_buffer(uint32_t slot) const;
  char* reply_area(uint32_t slot) const;
  char* staging() const;

  // Clears the shared words of stream slot `slot` for a new stream: empty
  // ring, nothing completed, no error, reply or warning.
  void ResetStreamSlot(uint32_t slot) const;

 private:
  SessionSegment(SharedMemory memory, const SessionHeader& layout);

  SharedMemory memory_;
  char* base_;
  SessionHeader layout_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_SESSION_SEGMENT_H_
