// One stream of one session, as a runner of its device's scheduler
// (device_scheduler.h): it has no thread of its own. An executor runs it a
// slice at a time: reads serialized commands from the stream's ring, runs
// them through the CommandExecutor in order and publishes each one's
// completion. Errors go to the stream's error record; a ring the client
// corrupted (or a gap in sequence numbers) faults the stream, which then
// stops reading. Nothing a client writes can make it crash or spin.
//
// When its ring is empty the stream spins briefly (only while cores are
// free), then parks (StreamSlot::parked, data_plane/doorbell.h) and gives
// its executor back; the client's next command wakes it through the
// device's doorbell.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_WORKER_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_WORKER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/command_ring.h"
#include "data_plane/session_layout.h"
#include "device_daemon/devices/device_scheduler.h"
#include "device_daemon/execution/command_costs.h"
#include "device_daemon/execution/command_timing.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/sessions/stream_engine.h"
#include "google/protobuf/arena.h"

namespace openreg::daemon {

class CommandExecutor;
class Session;

// Stores the stream's first unreported error: the text fields first, then
// error_code with release order so that the client never sees a code with
// half-written text. Does nothing when an error is already pending.
void RecordStreamError(StreamSlot* slot, uint64_t sequence,
                       absl::string_view op, const absl::Status& status);

class StreamWorker : public RunningStream,
                     public DeviceScheduler::Runner,
                     public std::enable_shared_from_this<StreamWorker> {
 public:
  // Creates the stream's runner and registers it with its device's
  // scheduler. `session` and `executor` must outlive the worker's run (the
  // session Joins it before it goes). The stream's priority is read from
  // its slot (set by the session first) and clamped to the supported range.
  static std::shared_ptr<StreamWorker> Start(Session* session, uint32_t slot,
                                             int device,
                                             CommandExecutor* executor);

  StreamWorker(Session* session, uint32_t slot, int device,
               CommandExecutor* executor);
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;
  // Stops (without draining) and joins, if still running.
  ~StreamWorker() override;

  // RunningStream. Join also waits until the scheduler has forgotten the
  // stream.
  void RequestStop() override;
  void RequestDrainAndStop() override;
  void Join() override;
  bool JoinFor(absl::Duration timeout) override;
  bool finished() const override {
    return finished_.load(std::memory_order_acquire);
  }
  int priority() const override { return priority_; }

  // DeviceScheduler::Runner.
  Outcome RunSlice(DeviceScheduler* scheduler) override;
  bool WantsToRun(bool housekeeping) const override;
  void Finished() override;

 private:
  enum class Step {
    kRan,    // one command ran
    kEmpty,  // the ring is empty
    kStop,   // the stream must stop (stop request or fault)
  };
  // Reads and runs one command: arena parse, sequence check, fault on a
  // corrupt ring, error record, completion.
  Step RunOne();
  // Spins a few microseconds for a command when cores are free and nothing
  // else waits; true when there is something to do (a command, a stop).
  bool SpinForWork(DeviceScheduler* scheduler);
  bool StopOrDrainRequested() const;
  void Fault(uint64_t sequence, const absl::Status& status);
  // Adds `command` (run from `started_ns` to `ended_ns`) to the session's
  // activity trace, if it is a kind the profiler shows.
  void RecordActivity(const proto::Command& command, int64_t started_ns,
                      int64_t ended_ns);
  // The cost profile, when it is on (command_costs.h).
  CommandCosts* costs() const;

  Session* const session_;
  const uint32_t slot_index_;
  const int device_;
  CommandExecutor* const executor_;
  StreamSlot* const slot_;
  const int priority_;
  DeviceScheduler* const scheduler_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{false};
  std::atomic<bool> started_{false};
  std::atomic<bool> finished_{false};

  const StreamKey cost_key_;
  // Used by one executor at a time (the scheduler's mutex orders them).
  RingReader reader_;
  CommandTiming timing_;
  // The scheduling wait of the slice's first command, not yet counted.
  int64_t slice_wait_ns_ = 0;
  const StreamContext context_;
  uint64_t last_sequence_;
  std::string payload_;
  // Each command is parsed into an arena reset per command, so parsing
  // allocates nothing once the first block fits a typical command.
  std::vector<char> arena_block_;
  google::protobuf::Arena arena_;

  absl::Mutex finish_mutex_;
  bool finish_signaled_ ABSL_GUARDED_BY(finish_mutex_) = false;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_WORKER_H_
