#include "device_daemon/sessions/session_segment.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace openreg::daemon {

absl::StatusOr<SessionSegment> SessionSegment::Create(
    const SessionLimits& limits, uint32_t device_count, uint64_t session_id) {
  const SessionHeader layout =
      ComputeSessionLayout(limits, device_count, session_id);
  absl::StatusOr<SharedMemory> memory = SharedMemory::Create(
      absl::StrCat("openreg-session-", session_id), layout.total_bytes);
  if (!memory.ok()) return memory.status();
  return SessionSegment(*std::move(memory), layout);
}

SessionSegment::SessionSegment(SharedMemory memory, const SessionHeader& layout)
    : memory_(std::move(memory)),
      base_(static_cast<char*>(memory_.data())),
      layout_(layout) {
  // The segment is zero-filled; the header is the only thing to write.
  std::memcpy(base_, &layout_, sizeof(layout_));
}

StreamSlot* SessionSegment::stream_slot(uint32_t slot) const {
  return reinterpret_cast<StreamSlot*>(base_ + layout_.stream_slots_offset) +
         slot;
}

EventSlot* SessionSegment::event_slot(uint32_t slot) const {
  return reinterpret_cast<EventSlot*>(base_ + layout_.event_slots_offset) +
         slot;
}

char* SessionSegment::ring_buffer(uint32_t slot) const {
  return base_ + layout_.rings_offset + slot * layout_.limits.ring_bytes;
}

char* SessionSegment::reply_area(uint32_t slot) const {
  return base_ + layout_.replies_offset + slot * layout_.limits.reply_bytes;
}

char* SessionSegment::staging() const { return base_ + layout_.staging_offset; }

void SessionSegment::ResetStreamSlot(uint32_t slot_index) const {
  StreamSlot* slot = stream_slot(slot_index);
  slot->ring.tail.value.store(0, std::memory_order_relaxed);
  slot->ring.head.value.store(0, std::memory_order_relaxed);
  slot->completed.value.store(0, std::memory_order_relaxed);
  slot->error_code.store(0, std::memory_order_relaxed);
  slot->error_sequence = 0;
  std::memset(slot->error_op, 0, sizeof(slot->error_op));
  std::memset(slot->error_message, 0, sizeof(slot->error_message));
  slot->reply_sequence = 0;
  slot->reply_size = 0;
  slot->warnings.state.store(WarningMailbox::kEmpty, std::memory_order_relaxed);
  slot->parked.store(0, std::memory_order_relaxed);
  slot->tainted_at.store(0, std::memory_order_relaxed);
  slot->warnings.dropped.store(0, std::memory_order_relaxed);
  slot->warnings.bytes = 0;
}

}  // namespace openreg::daemon
