// Single-producer single-consumer ring of variable-length records in shared
// memory: a client writes commands for one stream, the daemon reads them.
//
// Written by hand: the ring must live in a segment shared by two processes,
// be validated against a hostile peer, and wait with futexes; no library
// does that. The producer side is serialized by the client (one mutex per
// stream); the consumer is one daemon thread per stream.
//
// Records are 8-byte aligned: an 8-byte header {uint32 length, uint32 kind}
// followed by `length` payload bytes. A record never wraps: when it does not
// fit before the end of the buffer the writer fills the rest with a padding
// record and starts again at offset 0. `head` and `tail` are byte positions
// that only grow; position % capacity is the offset in the buffer.
#ifndef OPENREG_DATA_PLANE_COMMAND_RING_H_
#define OPENREG_DATA_PLANE_COMMAND_RING_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "data_plane/waitable_counter.h"

namespace openreg {

// Control words of one ring, in shared memory.
struct RingControl {
  WaitableCounter tail;  // bytes published by the producer
  WaitableCounter head;  // bytes consumed by the consumer
};

inline constexpr uint32_t kRecordData = 1;
inline constexpr uint32_t kRecordPadding = 2;
inline constexpr size_t kRecordHeaderBytes = 8;

// Bytes a record with `payload` bytes occupies in the ring.
constexpr uint64_t RecordBytes(uint64_t payload) {
  return (kRecordHeaderBytes + payload + 7) & ~uint64_t{7};
}

class RingWriter {
 public:
  // `buffer` has `capacity` bytes (a multiple of 8) in shared memory.
  RingWriter(RingControl* control, char* buffer, uint64_t capacity);

  // Largest payload one record may carry: half the ring, so that a record
  // plus the padding before it always fits in an empty ring.
  uint64_t MaxPayload() const { return capacity_ / 2 - kRecordHeaderBytes; }

  // Appends one record. Returns kResourceExhausted when the ring is full
  // (nothing written) and kInvalidArgument when the payload is too large.
  absl::Status TryWrite(const void* payload, uint64_t size);

  // Like TryWrite, but waits up to `timeout` for the consumer to make room.
  // A full ring is refilled in batches: the writer waits until the consumer
  // has freed 1/kRefillFraction of the ring (or the record's room, if
  // larger), not until the next record is read. Waking at every record
  // cost the daemon a futex wake per command and put the woken client on a
  // core next to the kernels (docs/ARCHITECTURE.md, "The cost of one op",
  // has the figures).
  absl::Status Write(const void* payload, uint64_t size,
                     absl::Duration timeout);
  static constexpr uint64_t kRefillFraction = 4;

  // Bytes free right now.
  uint64_t FreeBytes() const;

 private:
  // The head position at which a writer that found the ring full at `tail`
  // goes on, for a payload of `size` bytes.
  uint64_t RefillHead(uint64_t tail, uint64_t size) const;

  RingControl* control_;
  char* buffer_;
  uint64_t capacity_;
  // The consumer's head as last read: heads only grow, so room computed
  // from it is never more than there is.
  uint64_t known_head_ = 0;
};

class RingReader {
 public:
  RingReader(RingControl* control, const char* buffer, uint64_t capacity);

  // Copies the next record's payload into `payload` and consumes it.
  // Returns kUnavailable when the ring is empty and kDataLoss when the
  // producer broke the ring's invariants (the ring is then unusable).
  absl::Status TryRead(std::string* payload);

  // True when the producer has published bytes not consumed yet (seq_cst
  // loads: the parking protocol of doorbell.h relies on it).
  bool HasData() const;

 private:
  RingControl* control_;
  const char* buffer_;
  uint64_t capacity_;
};

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_COMMAND_RING_H_
