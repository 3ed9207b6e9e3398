// A session's activity trace (torch.profiler's device timeline,
// docs/OBSERVABILITY.md): while on, each stream worker records when each
// of the session's kernels, copies, memsets and collectives ran, with the
// profiler's correlation id the client stamped on the command.
//
// Cost contract: off, a command costs one relaxed load (on()); on, two
// clock reads and one append under a mutex that only this session's
// streams take. At most kMaxTracedActivities records are kept per start;
// later ones are counted as dropped, never block.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_ACTIVITY_TRACE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_ACTIVITY_TRACE_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "protos/control.pb.h"

namespace openreg::daemon {

inline constexpr size_t kMaxTracedActivities = 1 << 20;

class ActivityTrace {
 public:
  bool on() const { return on_.load(std::memory_order_relaxed); }

  // Clears the record and starts recording.
  void Start();
  // Stops and moves the record out; `dropped` gets the records past the
  // bound.
  std::vector<proto::DeviceActivity> Stop(uint64_t* dropped);

  void Record(proto::DeviceActivity activity);

 private:
  std::atomic<bool> on_{false};
  absl::Mutex mutex_;
  std::vector<proto::DeviceActivity> records_ ABSL_GUARDED_BY(mutex_);
  uint64_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_ACTIVITY_TRACE_H_
