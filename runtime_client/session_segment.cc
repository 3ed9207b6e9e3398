#include "runtime_client/session_segment.h"

#include "absl/strings/str_cat.h"
#include "data_plane/device_address.h"
#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

// Generous upper bounds: beyond them the header is corrupt, not large.
constexpr uint32_t kMaxStreamSlots = 1 << 16;
constexpr uint32_t kMaxEventSlots = 1 << 20;

absl::Status Corrupt(absl::string_view what) {
  return MakeError(
      Error::kInternal,
      absl::StrCat("openreg: the daemon's session segment is invalid (", what,
                   "); the daemon and this client are probably from "
                   "different builds"));
}

// True when [offset, offset + count * size) lies within `limit` bytes,
// without overflowing.
bool RegionFits(uint64_t offset, uint64_t count, uint64_t size,
                uint64_t limit) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) return false;
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end)) return false;
  return end <= limit;
}

}  // namespace

absl::Status ValidateSessionHeader(const SessionHeader& header,
                                   uint64_t mapped_bytes,
                                   uint64_t expected_session_id) {
  if (header.magic != kSessionMagic) return Corrupt("bad magic");
  if (header.protocol_version != kProtocolVersion) {
    return MakeError(
        Error::kVersionMismatch,
        absl::StrCat("openreg: the daemon's session segment has protocol "
                     "version ",
                     header.protocol_version, " but this client speaks ",
                     kProtocolVersion,
                     "; restart the daemon from the same build as the client"));
  }
  if (header.session_id != expected_session_id) {
    return Corrupt("session id differs from the attach answer");
  }
  if (header.device_count == 0 ||
      header.device_count > static_cast<uint32_t>(kMaxDevices)) {
    return Corrupt(absl::StrCat("device count ", header.device_count));
  }
  const SessionLimits& limits = header.limits;
  if (limits.max_streams < header.device_count ||
      limits.max_streams > kMaxStreamSlots) {
    return Corrupt(absl::StrCat("max_streams ", limits.max_streams));
  }
  if (limits.max_events > kMaxEventSlots) {
    return Corrupt(absl::StrCat("max_events ", limits.max_events));
  }
  if (limits.ring_bytes < 64 || limits.ring_bytes % 8 != 0) {
    return Corrupt(absl::StrCat("ring_bytes ", limits.ring_bytes));
  }
  if (header.total_bytes > mapped_bytes) {
    return Corrupt(absl::StrCat("total_bytes ", header.total_bytes,
                                " exceeds the mapping of ", mapped_bytes));
  }
  if (header.stream_slots_offset % alignof(StreamSlot) != 0 ||
      header.event_slots_offset % alignof(EventSlot) != 0 ||
      header.rings_offset % 8 != 0) {
    return Corrupt("misaligned region");
  }
  const uint64_t total = header.total_bytes;
  if (!RegionFits(header.stream_slots_offset, limits.max_streams,
                  sizeof(StreamSlot), total) ||
      !RegionFits(header.event_slots_offset, limits.max_events,
                  sizeof(EventSlot), total) ||
      !RegionFits(header.rings_offset, limits.max_streams, limits.ring_bytes,
                  total) ||
      !RegionFits(header.replies_offset, limits.max_streams, limits.reply_bytes,
                  total) ||
      !RegionFits(header.staging_offset, 1, limits.staging_bytes, total)) {
    return Corrupt("a region lies outside the segment");
  }
  if (limits.staging_bytes == 0) return Corrupt("empty staging area");
  return absl::OkStatus();
}

}  // namespace openreg::client
