#include "runtime_client/stream_capture.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

// The captures that forbid potentially unsafe calls somewhere (modes
// kGlobal and kThreadLocal), so that CheckUnsafeCall finds them.
struct StrictCaptures {
  absl::Mutex mutex;
  absl::flat_hash_set<StreamCapture*> active ABSL_GUARDED_BY(mutex);
  std::atomic<int> count{0};
};

StrictCaptures& Strict() {
  static auto* captures = new StrictCaptures;
  return *captures;
}

thread_local CaptureMode thread_mode = CaptureMode::kGlobal;

absl::string_view ModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kGlobal:
      return "global";
    case CaptureMode::kThreadLocal:
      return "thread_local";
    case CaptureMode::kRelaxed:
      return "relaxed";
  }
  return "unknown";
}

}  // namespace

StreamCapture::StreamCapture(uint64_t id, int device, uint32_t origin_slot,
                             CaptureMode mode)
    : id_(id),
      device_(device),
      origin_slot_(origin_slot),
      mode_(mode),
      thread_(std::this_thread::get_id()) {
  lane_commands_[origin_slot] = 0;
  if (mode_ == CaptureMode::kRelaxed) return;
  StrictCaptures& strict = Strict();
  absl::MutexLock lock(&strict.mutex);
  strict.active.insert(this);
  strict.count.fetch_add(1, std::memory_order_release);
}

StreamCapture::~StreamCapture() {
  if (mode_ == CaptureMode::kRelaxed) return;
  StrictCaptures& strict = Strict();
  absl::MutexLock lock(&strict.mutex);
  strict.active.erase(this);
  strict.count.fetch_sub(1, std::memory_order_release);
}

absl::Status StreamCapture::Record(
    uint32_t slot, absl::FunctionRef<absl::string_view(uint64_t)> encode) {
  absl::MutexLock lock(&mutex_);
  if (!invalidated_.ok()) {
    return MakeError(
        Error::kStreamCaptureInvalidated,
        absl::StrCat("openreg: operation failed due to a previous error "
                     "during capture (",
                     invalidated_.message(), ")"));
  }
  commands_.emplace_back(encode(commands_.size() + 1));
  ++lane_commands_[slot];
  return absl::OkStatus();
}

CapturePosition StreamCapture::Position(uint32_t slot) {
  absl::MutexLock lock(&mutex_);
  return {id_, slot, lane_commands_[slot]};
}

void StreamCapture::NoteWait(uint32_t slot, const CapturePosition& awaited) {
  absl::MutexLock lock(&mutex_);
  waits_.push_back({slot, lane_commands_[slot], awaited});
}

void StreamCapture::AddLane(uint32_t slot) {
  absl::MutexLock lock(&mutex_);
  lane_commands_.try_emplace(slot, 0);
}

std::vector<uint32_t> StreamCapture::Lanes() {
  absl::MutexLock lock(&mutex_);
  std::vector<uint32_t> lanes;
  for (const auto& [slot, count] : lane_commands_) lanes.push_back(slot);
  return lanes;
}

absl::Status StreamCapture::Invalidation() {
  absl::MutexLock lock(&mutex_);
  return invalidated_;
}

void StreamCapture::Invalidate(const absl::Status& error) {
  absl::MutexLock lock(&mutex_);
  if (invalidated_.ok()) invalidated_ = error;
}

absl::StatusOr<std::vector<std::string>> StreamCapture::Finish() {
  absl::MutexLock lock(&mutex_);
  if (!invalidated_.ok()) {
    return MakeError(
        Error::kStreamCaptureInvalidated,
        absl::StrCat("openreg: operation failed due to a previous error "
                     "during capture: ",
                     invalidated_.message()));
  }
  // How far each lane's work is known to be done when the origin's is:
  // all of the origin's; then, transitively, what a covered position
  // waited for.
  absl::flat_hash_map<uint32_t, uint64_t> covered;
  covered[origin_slot_] = UINT64_MAX;
  bool changed = true;
  while (changed) {
    changed = false;
    for (const Wait& wait : waits_) {
      auto waiter = covered.find(wait.waiter);
      if (waiter == covered.end() || waiter->second < wait.waiter_index) {
        continue;
      }
      uint64_t& awaited = covered[wait.awaited.slot];
      if (awaited < wait.awaited.index) {
        awaited = wait.awaited.index;
        changed = true;
      }
    }
  }
  for (const auto& [slot, count] : lane_commands_) {
    if (count > covered[slot]) {
      return MakeError(
          Error::kStreamCaptureInvalidated,
          absl::StrCat(
              "openreg: capture unjoined: stream ", slot,
              " joined the capture of stream ", origin_slot_, " and its last ",
              count - covered[slot],
              " recorded commands were not waited for by the capturing "
              "stream (record an event on stream ",
              slot, " after its work and make stream ", origin_slot_,
              " wait for it before ending the capture)"));
    }
  }
  return std::move(commands_);
}

absl::Status CheckUnsafeCall(absl::string_view call) {
  StrictCaptures& strict = Strict();
  if (strict.count.load(std::memory_order_acquire) == 0) {
    return absl::OkStatus();
  }
  if (thread_mode == CaptureMode::kRelaxed) return absl::OkStatus();
  absl::MutexLock lock(&strict.mutex);
  const std::thread::id self = std::this_thread::get_id();
  StreamCapture* forbidding = nullptr;
  for (StreamCapture* capture : strict.active) {
    if (capture->mode() == CaptureMode::kGlobal || capture->thread() == self) {
      forbidding = capture;
      break;
    }
  }
  if (forbidding == nullptr) return absl::OkStatus();
  absl::Status error = MakeError(
      Error::kStreamCaptureUnsupported,
      absl::StrCat("openreg: operation not permitted when stream is "
                   "capturing: ",
                   call, " while stream ", forbidding->origin_slot(),
                   " captures with capture_error_mode=\"",
                   ModeName(forbidding->mode()),
                   "\" (potentially unsafe calls are refused; capture with "
                   "\"relaxed\" to allow them)"));
  for (StreamCapture* capture : strict.active) {
    if (capture->mode() == CaptureMode::kGlobal || capture->thread() == self) {
      capture->Invalidate(error);
    }
  }
  return error;
}

absl::Status RefuseOnCapturingStream(StreamCapture& capture, uint32_t slot,
                                     absl::string_view call) {
  absl::Status error = MakeError(
      Error::kStreamCaptureUnsupported,
      absl::StrCat("openreg: operation not permitted when stream is "
                   "capturing: ",
                   call, " on stream ", slot,
                   ", which is capturing (it needs the work done now, and "
                   "captured work only runs when the graph is replayed)"));
  capture.Invalidate(error);
  return error;
}

CaptureMode ThreadCaptureMode() { return thread_mode; }
void SetThreadCaptureMode(CaptureMode mode) { thread_mode = mode; }

}  // namespace openreg::client
