// Test-side producer for one stream of a session segment: writes commands
// into the stream's ring the way the runtime client does and reads back
// completions and error records.
#ifndef OPENREG_TESTS_CPP_STREAM_DRIVER_H_
#define OPENREG_TESTS_CPP_STREAM_DRIVER_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "data_plane/command_ring.h"
#include "data_plane/doorbell.h"
#include "data_plane/session_layout.h"
#include "protos/commands.pb.h"

namespace openreg {

struct StreamErrorRecord {
  static constexpr uint32_t kTimedOut = 0xffffffff;
  uint32_t code = 0;  // proto::ErrorCode
  uint64_t sequence = 0;
  std::string op;
  std::string message;
};

// For readable gtest failures.
void PrintTo(const StreamErrorRecord& record, std::ostream* out);

class StreamDriver {
 public:
  // `doorbell` is the stream's device's and `ring_fd` the session's
  // (data_plane/doorbell.h): rung after a command for a parked stream, as
  // the runtime client does. Required: without them the daemon would find
  // commands only at its periodic check (100 ms), which made tests slow
  // rather than fail.
  StreamDriver(StreamSlot* slot, char* ring, uint64_t ring_bytes,
               Doorbell* doorbell, int ring_fd);

  // Assigns the next sequence number, writes the command and returns the
  // sequence.
  uint64_t Submit(proto::Command command);
  // Writes `bytes` as one record, as if it were the next command.
  uint64_t SubmitRaw(const std::string& bytes);
  // Writes a command with an explicit sequence (to break the ordering).
  void SubmitWithSequence(proto::Command command, uint64_t sequence);

  bool WaitFor(uint64_t sequence,
               absl::Duration timeout = absl::Seconds(30)) const;
  // Submit + WaitFor; returns the error recorded for this command (and
  // clears it), nullopt on success. A command that does not complete gives
  // code kTimedOut.
  std::optional<StreamErrorRecord> Run(proto::Command command);

  // The pending error record, cleared like a client would.
  std::optional<StreamErrorRecord> TakeError();

  StreamSlot* slot() const { return slot_; }
  uint64_t last_submitted() const { return last_; }

 private:
  void RingIfParked();

  StreamSlot* slot_;
  RingWriter writer_;
  Doorbell* doorbell_;
  int ring_fd_;
  uint64_t last_ = 0;
};

}  // namespace openreg

#endif  // OPENREG_TESTS_CPP_STREAM_DRIVER_H_
