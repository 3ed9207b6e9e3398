// Layout of a session's shared-memory segment. The daemon creates the
// segment (a memfd) at attach, zero-fills it, writes the header and passes
// the fd to the client over the attach socket. Both sides map it MAP_SHARED.
//
//   [SessionHeader][StreamSlot x max_streams][EventSlot x max_events]
//   [ring buffers: ring_bytes x max_streams]
//   [reply areas: reply_bytes x max_streams]
//   [staging area: staging_bytes]
//
// Streams: slot i < device_count is device i's default stream; other slots
// are handed out by CreateStream. Each stream has a command ring (client ->
// daemon), a completion counter (daemon -> client; the sequence number of
// the last finished command), an error record and a reply area for
// synchronous ops.
#ifndef OPENREG_DATA_PLANE_SESSION_LAYOUT_H_
#define OPENREG_DATA_PLANE_SESSION_LAYOUT_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "data_plane/command_ring.h"
#include "data_plane/waitable_counter.h"
#include "data_plane/warning_mailbox.h"

namespace openreg {

// Bumped whenever this layout, the attach messages (attach_protocol.h) or
// the protos (commands, control, faults) change in a way that old peers
// cannot handle.
inline constexpr uint32_t kProtocolVersion = 9;
inline constexpr uint64_t kSessionMagic = 0x4f50454e52454731ull;  // OPENREG1

struct SessionLimits {
  uint32_t max_streams = 64;
  uint32_t max_events = 4096;
  uint64_t ring_bytes = 256 * 1024;
  uint64_t reply_bytes = 256 * 1024;
  uint64_t staging_bytes = 64ull * 1024 * 1024;
};

inline constexpr uint64_t kStagingChunkBytes = 4ull * 1024 * 1024;

enum class StreamState : uint32_t {
  kFree = 0,
  kActive = 1,
  kFaulted = 2,  // the daemon stopped reading this ring (corrupt input)
};

struct alignas(64) StreamSlot {
  RingControl ring;
  WaitableCounter completed;    // last finished command's sequence
  std::atomic<uint32_t> state;  // StreamState
  int32_t device;
  int32_t priority;
  // First unreported error on this stream. The daemon writes the text
  // fields, then publishes error_code (release); the client reads and
  // clears error_code after reporting it.
  std::atomic<uint32_t> error_code;  // proto::ErrorCode, 0 = none
  uint64_t error_sequence;
  char error_op[64];
  // Long enough for ATen's longest messages (addcdiv's is ~650 bytes).
  char error_message[2048];
  // Synchronous op replies: reply_size bytes of a serialized OpReply in the
  // stream's reply area, valid once `completed` reaches reply_sequence.
  uint64_t reply_sequence;
  uint64_t reply_size;
  // Warnings of the stream's asynchronous kernels (warning_mailbox.h).
  WarningMailbox warnings;
  // The command of a collective that failed on this stream, 0 if none
  // (daemon-written; device_daemon/sessions/stream_taints.h): a wait at or
  // past it must reach the daemon, which fails it, even once the stream
  // finished that work.
  std::atomic<uint64_t> tainted_at;
  // 1 while the daemon has no executor on this stream because its ring was
  // empty; the client clears it after publishing a command and rings the
  // device's doorbell (doorbell.h). Alone in its cache line: both sides
  // write it.
  alignas(64) std::atomic<uint32_t> parked;
};

struct alignas(64) EventSlot {
  std::atomic<uint32_t> in_use;
  // Atomic: streams may record one event concurrently (ThreadSanitizer
  // caught two stream workers writing it at once).
  std::atomic<uint32_t> stream_slot;
  // Set by the daemon when the stream reaches the RecordEvent command.
  std::atomic<uint64_t> recorded_sequence;
  std::atomic<uint64_t> timestamp_ns;  // MonotonicNanoseconds()
  // Interprocess events only, written by the client when it enqueues an
  // EventRecord (PackEventPosition), so that the daemon can tell an
  // importer what to wait for before the record has run. 0 = nothing
  // pending (never recorded, or the recording stream was destroyed after
  // finishing).
  std::atomic<uint64_t> enqueued_position;
};

// A (stream slot, sequence) in one word, so that a reader never sees half
// of an update: the slot in the top 16 bits, the sequence below (2^48
// commands per stream).
inline constexpr int kEventPositionSequenceBits = 48;
inline constexpr uint64_t PackEventPosition(uint32_t stream_slot,
                                            uint64_t sequence) {
  return (static_cast<uint64_t>(stream_slot) << kEventPositionSequenceBits) |
         (sequence & ((uint64_t{1} << kEventPositionSequenceBits) - 1));
}
inline constexpr uint32_t EventPositionStream(uint64_t packed) {
  return static_cast<uint32_t>(packed >> kEventPositionSequenceBits);
}
inline constexpr uint64_t EventPositionSequence(uint64_t packed) {
  return packed & ((uint64_t{1} << kEventPositionSequenceBits) - 1);
}

struct alignas(64) SessionHeader {
  uint64_t magic;
  uint32_t protocol_version;
  uint32_t device_count;
  uint64_t session_id;
  SessionLimits limits;
  uint64_t stream_slots_offset;
  uint64_t event_slots_offset;
  uint64_t rings_offset;
  uint64_t replies_offset;
  uint64_t staging_offset;
  uint64_t total_bytes;
  // A sticky error (an injected illegal address or uncorrectable ECC
  // error), written with PublishStickyError and read with ReadStickyError:
  // the client then fails every later call with it, at the call, as CUDA
  // does after a sticky error. Never cleared. (Plain fields accessed
  // atomically, because the header is copied as a value elsewhere.)
  uint32_t sticky_error_code;  // proto::ErrorCode, 0 = none
  char sticky_error_message[1024];
};

// Daemon side: stores the message, then publishes the code (release).
void PublishStickyError(SessionHeader* header, uint32_t code,
                        std::string_view message);
// Client side: 0, or the published code (acquire) with its message.
uint32_t ReadStickyError(const SessionHeader* header, std::string* message);

// Offsets of every region for `limits`; the daemon fills a SessionHeader
// from it and both sides use the header's values afterwards.
SessionHeader ComputeSessionLayout(const SessionLimits& limits,
                                   uint32_t device_count, uint64_t session_id);

// Typed access to a mapped segment whose header has been validated.
class SessionView {
 public:
  explicit SessionView(void* base) : base_(static_cast<char*>(base)) {}

  SessionHeader* header() const {
    return reinterpret_cast<SessionHeader*>(base_);
  }
  StreamSlot* stream(uint32_t slot) const {
    return reinterpret_cast<StreamSlot*>(base_ +
                                         header()->stream_slots_offset) +
           slot;
  }
  EventSlot* event(uint32_t slot) const {
    return reinterpret_cast<EventSlot*>(base_ + header()->event_slots_offset) +
           slot;
  }
  char* ring_buffer(uint32_t slot) const {
    return base_ + header()->rings_offset + slot * header()->limits.ring_bytes;
  }
  char* reply_area(uint32_t slot) const {
    return base_ + header()->replies_offset +
           slot * header()->limits.reply_bytes;
  }
  char* staging() const { return base_ + header()->staging_offset; }

 private:
  char* base_;
};

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SESSION_LAYOUT_H_
