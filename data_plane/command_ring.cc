#include "data_plane/command_ring.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace openreg {
namespace {

struct RecordHeader {
  uint32_t length;
  uint32_t kind;
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);

}  // namespace

RingWriter::RingWriter(RingControl* control, char* buffer, uint64_t capacity)
    : control_(control), buffer_(buffer), capacity_(capacity) {}

uint64_t RingWriter::FreeBytes() const {
  const uint64_t tail = control_->tail.Load();
  const uint64_t head = control_->head.Load();
  return capacity_ - (tail - head);
}

absl::Status RingWriter::TryWrite(const void* payload, uint64_t size) {
  if (size > MaxPayload()) {
    return absl::InvalidArgumentError(
        absl::StrCat("command of ", size, " bytes exceeds the ring's limit of ",
                     MaxPayload(), " bytes"));
  }
  uint64_t tail = control_->tail.Load();
  const uint64_t need = RecordBytes(size);
  const uint64_t offset = tail % capacity_;
  const uint64_t to_end = capacity_ - offset;
  const uint64_t padding = need > to_end ? to_end : 0;
  // The consumer's head is read only when the head seen last leaves too
  // little room (or is ahead of the tail: the daemon restarted a reused
  // slot's ring at 0): it is the line the daemon writes after every read,
  // and loading it each time cost a cache miss per command.
  if (known_head_ > tail || padding + need > capacity_ - (tail - known_head_)) {
    known_head_ = control_->head.Load();
    if (padding + need > capacity_ - (tail - known_head_)) {
      return absl::ResourceExhaustedError("command ring is full");
    }
  }
  if (padding != 0) {
    RecordHeader pad{static_cast<uint32_t>(padding - kRecordHeaderBytes),
                     kRecordPadding};
    std::memcpy(buffer_ + offset, &pad, sizeof(pad));
    tail += padding;
  }
  RecordHeader header{static_cast<uint32_t>(size), kRecordData};
  char* record = buffer_ + tail % capacity_;
  std::memcpy(record, &header, sizeof(header));
  std::memcpy(record + kRecordHeaderBytes, payload, size);
  control_->tail.Advance(tail + need);
  return absl::OkStatus();
}

absl::Status RingWriter::Write(const void* payload, uint64_t size,
                               absl::Duration timeout) {
  absl::Status status = TryWrite(payload, size);
  if (!absl::IsResourceExhausted(status)) return status;
  // Only a full ring reads the clock: the common path is one TryWrite.
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    // At the deadline, whatever room there is will do.
    if (left <= absl::ZeroDuration()) return TryWrite(payload, size);
    const bool refilled = control_->head.WaitForAtLeast(
        RefillHead(control_->tail.Load(), size),
        std::min(left, absl::Milliseconds(50)));
    if (refilled) {
      status = TryWrite(payload, size);
      if (!absl::IsResourceExhausted(status)) return status;
    }
  }
}

uint64_t RingWriter::RefillHead(uint64_t tail, uint64_t size) const {
  // The worst case of TryWrite's room: padding up to the end plus the record.
  const uint64_t worst = std::min(capacity_, 2 * RecordBytes(size));
  const uint64_t room = std::max(worst, capacity_ / kRefillFraction);
  // A full ring has tail > capacity - worst: the target is a position the
  // head reaches once it consumed what is queued.
  if (tail + room <= capacity_) return 0;
  return tail + room - capacity_;
}

RingReader::RingReader(RingControl* control, const char* buffer,
                       uint64_t capacity)
    : control_(control), buffer_(buffer), capacity_(capacity) {}

bool RingReader::HasData() const {
  return control_->tail.value.load(std::memory_order_seq_cst) !=
         control_->head.value.load(std::memory_order_seq_cst);
}

absl::Status RingReader::TryRead(std::string* payload) {
  // The producer is untrusted: positions and lengths are checked before use
  // and the payload is copied out before it is consumed.
  uint64_t head = control_->head.Load();
  while (true) {
    const uint64_t tail = control_->tail.Load();
    if (tail == head) return absl::UnavailableError("ring is empty");
    if (tail < head || tail - head > capacity_ || tail % 8 != 0) {
      return absl::DataLossError(
          absl::StrCat("command ring corrupted: head=", head, " tail=", tail));
    }
    const uint64_t offset = head % capacity_;
    RecordHeader header;
    std::memcpy(&header, buffer_ + offset, sizeof(header));
    const uint64_t bytes = RecordBytes(header.length);
    if (bytes > capacity_ - offset || bytes > tail - head) {
      return absl::DataLossError(
          absl::StrCat("command ring corrupted: record of ", header.length,
                       " bytes at offset ", offset, " overruns the ring"));
    }
    if (header.kind == kRecordPadding) {
      head += bytes;
      control_->head.Advance(head);
      continue;
    }
    if (header.kind != kRecordData) {
      return absl::DataLossError(
          absl::StrCat("command ring corrupted: record kind ", header.kind));
    }
    payload->assign(buffer_ + offset + kRecordHeaderBytes, header.length);
    control_->head.Advance(head + bytes);
    return absl::OkStatus();
  }
}

}  // namespace openreg
