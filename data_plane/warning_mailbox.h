// A per-stream mailbox in the session segment through which the daemon
// hands the client the warnings of asynchronous kernels (those that
// depend on tensor values: the first launch of each op signature is
// checked and returns its warnings in its reply). The client raises them
// at its next synchronizing call.
//
// Contract:
//  - One writer, the daemon's worker of the stream (Post); any number of
//    client threads take (Take), one at a time by the state's CAS.
//  - Records are opaque byte strings (serialized proto::KernelWarning),
//    appended while they fit; what does not fit, or arrives while a client
//    is reading, is counted in `dropped` instead.
//  - The client can write anything into the segment: Post checks `bytes`
//    before it appends and never reads past the mailbox.
//
// Hand-written (no library does lock-free single-producer mailboxes in
// shared memory between processes): four states, three CAS transitions.
#ifndef OPENREG_DATA_PLANE_WARNING_MAILBOX_H_
#define OPENREG_DATA_PLANE_WARNING_MAILBOX_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace openreg {

struct WarningMailbox {
  enum State : uint32_t { kEmpty = 0, kWriting = 1, kReady = 2, kReading = 3 };
  static constexpr uint32_t kCapacity = 4096;

  std::atomic<uint32_t> state;
  std::atomic<uint32_t> dropped;  // records lost since the last Take
  uint32_t bytes;                 // used bytes of `data`
  char data[kCapacity];           // [uint32 length][bytes]...
};

// Daemon side: appends one record; false (and counted as dropped) when it
// does not fit or a client is reading.
bool PostToMailbox(WarningMailbox& mailbox, std::string_view record);

// Client side: takes every record posted so far (none while the daemon is
// writing: they come at the next call). `dropped` receives the number lost.
std::vector<std::string> TakeFromMailbox(WarningMailbox& mailbox,
                                         uint32_t* dropped);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_WARNING_MAILBOX_H_
