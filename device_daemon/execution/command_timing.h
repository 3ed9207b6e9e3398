// Where one command's time goes in the daemon, stage by stage, measured
// only while the cost profile is on (command_costs.h): reading it from the
// ring, waiting for an executor, the fault hook, the kernel settings gate,
// decoding the launch, the kernel, storing the reply, publishing the
// completion. The stream worker owns one CommandTiming and points its
// StreamContext at it; the command executor and the op runner add their
// stages through it.
//
// Cost contract: with the profile off, a StageTimer is one branch; with it
// on, two clock reads (data_plane/monotonic_clock.h, ~20 ns each) per
// stage.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_TIMING_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_TIMING_H_

#include <array>
#include <cstdint>

#include "data_plane/monotonic_clock.h"

namespace openreg::daemon {

enum class CostStage : int {
  kRead,      // ring record copied out and parsed
  kWait,      // queued for an executor (the first command of a slice)
  kHook,      // the fault hook around the command
  kSettings,  // the kernel settings gate and thread settings
  kDecode,    // a launch's arguments decoded and checked
  kKernel,    // the kernel (or the copy, memset, event, wait) itself
  kReply,     // a launch's results stored or copied into place
  kComplete,  // the completion counter advanced (and its waiters woken)
};
inline constexpr int kCostStages = 8;

struct CommandTiming {
  bool enabled = false;
  std::array<int64_t, kCostStages> nanoseconds{};
  // Intra-op threads the launch asked for (kernels/launch_threads.h), if
  // any.
  int kernel_threads = 0;
  bool synchronous = false;  // a launch the client waits for
  // The kernel ran with one thread fewer than that, leaving a core to the
  // busy client (kernels/core_sharing.h).
  bool fewer_threads = false;

  void Clear() {
    nanoseconds.fill(0);
    kernel_threads = 0;
    synchronous = false;
    fewer_threads = false;
  }
  void Add(CostStage stage, int64_t elapsed) {
    nanoseconds[static_cast<int>(stage)] += elapsed;
  }
};

// Adds the time from construction to destruction (or Stop) to `stage` of
// `timing`, when `timing` is on. A null timing is off.
class StageTimer {
 public:
  StageTimer(CommandTiming* timing, CostStage stage)
      : timing_(timing != nullptr && timing->enabled ? timing : nullptr),
        stage_(stage),
        start_(timing_ != nullptr ? MonotonicNanoseconds() : 0) {}
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() { Stop(); }

  void Stop() {
    if (timing_ == nullptr) return;
    timing_->Add(stage_, MonotonicNanoseconds() - start_);
    timing_ = nullptr;
  }

 private:
  CommandTiming* timing_;
  const CostStage stage_;
  const int64_t start_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_TIMING_H_
