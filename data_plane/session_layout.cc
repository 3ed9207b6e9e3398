#include "data_plane/session_layout.h"

#include <algorithm>
#include <cstring>

namespace openreg {
namespace {

constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

constexpr uint64_t kPage = 4096;

}  // namespace

SessionHeader ComputeSessionLayout(const SessionLimits& limits,
                                   uint32_t device_count, uint64_t session_id) {
  SessionHeader header{};
  header.magic = kSessionMagic;
  header.protocol_version = kProtocolVersion;
  header.device_count = device_count;
  header.session_id = session_id;
  header.limits = limits;
  // Rings and reply areas are page multiples so every one starts on a page.
  header.limits.ring_bytes = AlignUp(limits.ring_bytes, kPage);
  header.limits.reply_bytes = AlignUp(limits.reply_bytes, kPage);
  header.limits.staging_bytes = AlignUp(limits.staging_bytes, kPage);
  uint64_t offset = AlignUp(sizeof(SessionHeader), kPage);
  header.stream_slots_offset = offset;
  offset = AlignUp(offset + limits.max_streams * sizeof(StreamSlot), kPage);
  header.event_slots_offset = offset;
  offset = AlignUp(offset + limits.max_events * sizeof(EventSlot), kPage);
  header.rings_offset = offset;
  offset += limits.max_streams * header.limits.ring_bytes;
  header.replies_offset = offset;
  offset += limits.max_streams * header.limits.reply_bytes;
  header.staging_offset = offset;
  offset += header.limits.staging_bytes;
  header.total_bytes = offset;
  return header;
}

void PublishStickyError(SessionHeader* header, uint32_t code,
                        std::string_view message) {
  const size_t length =
      std::min(message.size(), sizeof(header->sticky_error_message) - 1);
  std::memcpy(header->sticky_error_message, message.data(), length);
  header->sticky_error_message[length] = '\0';
  __atomic_store_n(&header->sticky_error_code, code, __ATOMIC_RELEASE);
}

uint32_t ReadStickyError(const SessionHeader* header, std::string* message) {
  const uint32_t code =
      __atomic_load_n(&header->sticky_error_code, __ATOMIC_ACQUIRE);
  if (code != 0 && message != nullptr) {
    // The daemon wrote the text before the code; bound it in case the
    // client-writable segment was scribbled on.
    const char* text = header->sticky_error_message;
    *message = std::string(
        text, strnlen(text, sizeof(header->sticky_error_message) - 1));
  }
  return code;
}

}  // namespace openreg
