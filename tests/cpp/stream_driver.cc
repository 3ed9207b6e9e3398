#include "tests/cpp/stream_driver.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace openreg {

StreamDriver::StreamDriver(StreamSlot* slot, char* ring, uint64_t ring_bytes,
                           Doorbell* doorbell, int ring_fd)
    : slot_(slot),
      writer_(&slot->ring, ring, ring_bytes),
      doorbell_(doorbell),
      ring_fd_(ring_fd),
      last_(slot->completed.Load()) {}

void StreamDriver::RingIfParked() {
  if (doorbell_ != nullptr && ClaimParked(&slot_->parked)) {
    RingDoorbell(doorbell_, ring_fd_);
  }
}

uint64_t StreamDriver::Submit(proto::Command command) {
  command.set_sequence(++last_);
  const std::string bytes = command.SerializeAsString();
  EXPECT_TRUE(
      writer_.Write(bytes.data(), bytes.size(), absl::Seconds(30)).ok());
  RingIfParked();
  return last_;
}

uint64_t StreamDriver::SubmitRaw(const std::string& bytes) {
  EXPECT_TRUE(
      writer_.Write(bytes.data(), bytes.size(), absl::Seconds(30)).ok());
  RingIfParked();
  return ++last_;
}

void StreamDriver::SubmitWithSequence(proto::Command command,
                                      uint64_t sequence) {
  command.set_sequence(sequence);
  const std::string bytes = command.SerializeAsString();
  EXPECT_TRUE(
      writer_.Write(bytes.data(), bytes.size(), absl::Seconds(30)).ok());
  RingIfParked();
}

bool StreamDriver::WaitFor(uint64_t sequence, absl::Duration timeout) const {
  // WaitForAtLeast may end early on a wake-up that did not reach `sequence`
  // (its callers wait in loops, as the runtime client does); so does this.
  const absl::Time deadline = absl::Now() + timeout;
  while (!slot_->completed.WaitForAtLeast(sequence, deadline - absl::Now())) {
    if (absl::Now() >= deadline) return false;
  }
  return true;
}

void PrintTo(const StreamErrorRecord& record, std::ostream* out) {
  *out << "{code " << record.code << ", sequence " << record.sequence
       << ", op '" << record.op << "': " << record.message << "}";
}

std::optional<StreamErrorRecord> StreamDriver::Run(proto::Command command) {
  const uint64_t sequence = Submit(std::move(command));
  if (!WaitFor(sequence)) {
    StreamErrorRecord timed_out;
    timed_out.code = StreamErrorRecord::kTimedOut;
    timed_out.sequence = sequence;
    timed_out.message = "command did not complete";
    return timed_out;
  }
  std::optional<StreamErrorRecord> error = TakeError();
  if (error.has_value()) {
    EXPECT_EQ(error->sequence, sequence) << error->message;
  }
  return error;
}

std::optional<StreamErrorRecord> StreamDriver::TakeError() {
  const uint32_t code = slot_->error_code.load(std::memory_order_acquire);
  if (code == 0) return std::nullopt;
  StreamErrorRecord record;
  record.code = code;
  record.sequence = slot_->error_sequence;
  record.op = slot_->error_op;
  record.message = slot_->error_message;
  slot_->error_code.store(0, std::memory_order_release);
  return record;
}

}  // namespace openreg
