// The client's side of one stream capture (openreg/graphs.h): the commands
// its streams recorded, which streams joined it and which of their work
// the capturing stream waited for, and whether it was invalidated. Also
// the process's capture modes, which say where potentially unsafe calls
// are refused (CheckUnsafeCall).
#ifndef OPENREG_RUNTIME_CLIENT_STREAM_CAPTURE_H_
#define OPENREG_RUNTIME_CLIENT_STREAM_CAPTURE_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "openreg/graphs.h"

namespace openreg::client {

// A position in a capture: after the first `index` commands (in the
// capture's issue order) of stream `slot`'s lane.
struct CapturePosition {
  uint64_t capture = 0;  // 0: not recorded in a capture
  uint32_t slot = 0;
  uint64_t index = 0;
};

class StreamCapture {
 public:
  StreamCapture(uint64_t id, int device, uint32_t origin_slot,
                CaptureMode mode);
  ~StreamCapture();

  uint64_t id() const { return id_; }
  int device() const { return device_; }
  uint32_t origin_slot() const { return origin_slot_; }
  CaptureMode mode() const { return mode_; }
  // The thread that began it (a kThreadLocal capture forbids unsafe calls
  // there only).
  std::thread::id thread() const { return thread_; }

  // Records a command of stream `slot`: `encode` serializes it given its
  // sequence in the graph. Fails once the capture is invalidated.
  absl::Status Record(uint32_t slot,
                      absl::FunctionRef<absl::string_view(uint64_t)> encode);
  // Where stream `slot` is now (for an event recorded on it).
  CapturePosition Position(uint32_t slot);
  // Stream `slot` (joined, or the origin) waits for `awaited`.
  void NoteWait(uint32_t slot, const CapturePosition& awaited);
  void AddLane(uint32_t slot);
  std::vector<uint32_t> Lanes();

  // The first error that invalidated the capture (OK while valid), and
  // invalidation.
  absl::Status Invalidation();
  void Invalidate(const absl::Status& error);

  // The recorded commands, once every joined stream's work was waited for
  // by the origin; else kStreamCaptureInvalidated naming the stream.
  absl::StatusOr<std::vector<std::string>> Finish();

 private:
  struct Wait {
    uint32_t waiter = 0;
    uint64_t waiter_index = 0;  // the waiter's commands after this depend
    CapturePosition awaited;
  };

  const uint64_t id_;
  const int device_;
  const uint32_t origin_slot_;
  const CaptureMode mode_;
  const std::thread::id thread_;
  absl::Mutex mutex_;
  std::vector<std::string> commands_ ABSL_GUARDED_BY(mutex_);
  // Per lane (stream slot): how many commands it recorded.
  absl::flat_hash_map<uint32_t, uint64_t> lane_commands_
      ABSL_GUARDED_BY(mutex_);
  std::vector<Wait> waits_ ABSL_GUARDED_BY(mutex_);
  absl::Status invalidated_ ABSL_GUARDED_BY(mutex_);
};

// kStreamCaptureUnsupported for potentially unsafe call `call` when a
// capture forbids it (see openreg/graphs.h), invalidating the captures
// that forbid it; OK otherwise. One relaxed load when nothing captures.
absl::Status CheckUnsafeCall(absl::string_view call);

// kStreamCaptureUnsupported for `call` on capturing stream `slot`, which
// it invalidates.
absl::Status RefuseOnCapturingStream(StreamCapture& capture, uint32_t slot,
                                     absl::string_view call);

// This thread's mode (ExchangeCaptureMode); kGlobal by default.
CaptureMode ThreadCaptureMode();
void SetThreadCaptureMode(CaptureMode mode);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_STREAM_CAPTURE_H_
