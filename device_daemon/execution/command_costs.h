// The daemon's cost profile: where its time goes, per op (each command's
// stages, command_timing.h), per stream (slices, parks, wakes, spinning)
// and per executor thread (busy time, sleeps, CPU), the CPU of the
// daemon's threads by role (executors, OpenMP workers, others), between a start
// or reset and a read. Off by default; started by --profile_costs, `openreg-ctl
// costs start` or torch.openreg.command_costs(). It is how
// docs/ARCHITECTURE.md ("The cost of one op") was measured.
//
// Cost contract: when off, a stream worker asks enabled() (one relaxed
// load) once per command and records nothing. When on, each command adds
// a dozen clock reads and one short critical section here. A start and a
// read each read every thread's /proc entries (a few hundred
// microseconds).
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_COSTS_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_COSTS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/base/thread_cpu.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_timing.h"
#include "protos/control.pb.h"

namespace openreg::daemon {

// Which stream an event belongs to.
struct StreamKey {
  uint64_t session_id = 0;
  int pid = 0;
  uint32_t slot = 0;
  int device = 0;
};

enum class StreamEvent {
  kSlice,         // an executor ran the stream
  kPark,          // its ring was empty: it gave its executor back
  kRungWake,      // its client rang for it
  kPeriodicWake,  // the periodic check found work (no ring)
  kSpinWithWork,  // a spin on its empty ring found a command
};

class CommandCosts {
 public:
  // `devices` (for their executors' counters) must outlive the profile.
  explicit CommandCosts(Devices* devices) : devices_(devices) {}

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Start resets and turns the profile on; Stop keeps what it counted.
  void Start();
  void Stop();
  void Reset();

  // A command of `stream` ran; `label` names its op or kind. Recorded
  // before the command's completion is published, so a read after a
  // client's synchronize counts every command it waited for; the time
  // publishing took (its complete stage) is added by RecordCompletion just
  // after, and may reach a read a moment later.
  void RecordCommand(const StreamKey& stream, absl::string_view label,
                     const CommandTiming& timing);
  void RecordCompletion(const StreamKey& stream, absl::string_view label,
                        int64_t nanoseconds);
  // A recorded command of a graph replay on `device` ran and took `timing`
  // (its stages, already part of the replay's): counted as "graph_replay >
  // LABEL", so that a replay's time is seen op by op.
  void RecordReplayed(int device, absl::string_view label,
                      const CommandTiming& timing);
  void RecordStreamEvent(const StreamKey& stream, StreamEvent event);
  void RecordSpin(const StreamKey& stream, int64_t nanoseconds);

  // Everything counted since the start or reset.
  proto::CostProfileReply Snapshot() const;

 private:
  struct OpTotals {
    uint64_t count = 0;
    std::array<uint64_t, kCostStages> nanoseconds{};
    int kernel_threads = 0;
    uint64_t synchronous = 0;
    uint64_t fewer_threads = 0;
  };
  using StreamId = std::tuple<uint64_t, uint32_t>;  // session, slot
  using ExecutorBaseline =
      std::vector<std::vector<DeviceScheduler::ExecutorStats>>;

  // `threads`: every thread's CPU now (read before the lock).
  void ResetLocked(absl::flat_hash_map<pid_t, ThreadCpu> threads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `thread`'s CPU in `now` less its CPU at the start.
  uint64_t ThreadCpuSinceStartLocked(
      pid_t thread, const absl::flat_hash_map<pid_t, ThreadCpu>& now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The threads' CPU since the start, summed by role and device.
  void AddThreadGroups(const absl::flat_hash_map<pid_t, ThreadCpu>& threads,
                       const absl::flat_hash_map<pid_t, int>& executor_devices,
                       proto::CostProfileReply* reply) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  proto::StreamCost& StreamLocked(const StreamKey& stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Devices* const devices_;
  std::atomic<bool> enabled_{false};

  mutable absl::Mutex mutex_;
  int64_t started_ns_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<std::pair<int, std::string>, OpTotals> ops_
      ABSL_GUARDED_BY(mutex_);
  std::map<StreamId, proto::StreamCost> streams_ ABSL_GUARDED_BY(mutex_);
  // The executors' counters at the start or reset, by device.
  ExecutorBaseline executor_baseline_ ABSL_GUARDED_BY(mutex_);
  // Every thread's CPU at the start or reset.
  absl::flat_hash_map<pid_t, ThreadCpu> thread_baseline_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_COMMAND_COSTS_H_
