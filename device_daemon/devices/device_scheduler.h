// The executors of one emulated device: a fixed pool of threads that runs
// the device's runnable streams ("runners"), so that the daemon's thread
// count follows its devices, not its streams or clients.
//
// Contract:
// - A runner is in exactly one state: queued (ready to run), running (on
//   one executor), idle (parked: its ring was empty) or gone. It runs on at
//   most one executor at a time, and every transition happens under the
//   scheduler's mutex, so an idle runner is queued exactly once however
//   many parties try to wake it.
// - Ready runners are picked by priority (lower value first, as on CUDA),
//   in FIFO order within a priority. A runner keeps its executor for a
//   slice (Runner::RunSlice decides, asking HigherPriorityWaiting and
//   OthersWaiting at command boundaries) and is queued at the back after
//   it yields, so equal priorities take turns.
// - Idle runners come back when a client rings (data_plane/doorbell.h):
//   executors with nothing to run wait on an epoll set that holds every
//   attached session's ring fd for this device (WatchRing; a session has
//   one per device, so a ring wakes only the stream's device), and one
//   woken by a ring asks
//   every idle runner WantsToRun(). Whenever an executor is idle, one
//   watches the epoll set; the executor that ran the last slice always
//   does, so a client's next ring goes to it; the others wait on standby
//   (and hand their OpenMP teams back) until work needs them, one being
//   called to watch while every watcher runs. An executor that is running
//   notices a ring at its next command boundary from the device's hint word
//   (one load; if a client rewrote the word, at its next wait instead). Waits
//   have a timeout after which executors look at idle runners' rings too
//   (a client that forgot to ring costs latency, never a lost command).
// - Managed blocking (blocking_region.h): a command about to wait (for
//   another stream, an interprocess event, an injected hang) enters a
//   BlockingRegion. While executors are blocked the scheduler keeps
//   `executors` threads available to run other runners, starting spare
//   threads if needed; spare threads exit once idle and not needed. Threads
//   grow only with commands blocked at the same moment.
// - A runner that returns kFinished is forgotten (the scheduler's reference
//   dropped from its tables) before Runner::Finished() is called, so that
//   an owner waiting for Finished() may destroy what the runner points to.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_SCHEDULER_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_SCHEDULER_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "data_plane/doorbell.h"
#include "data_plane/stream_priority.h"

namespace openreg::daemon {

class DeviceScheduler {
 public:
  class Runner {
   public:
    enum class Outcome {
      kYield,     // more to do: queue me again (at the back)
      kParked,    // my ring was empty and I set my parked flag
      kFinished,  // never run me again
    };
    virtual ~Runner() = default;
    // In the clamped stream priority range (stream_priority.h).
    virtual int priority() const = 0;
    // Runs commands on the calling executor until the runner yields, parks
    // or finishes.
    virtual Outcome RunSlice(DeviceScheduler* scheduler) = 0;
    // Asked under the scheduler's mutex about an idle runner: should it be
    // queued? `housekeeping` is set on the periodic check, which should
    // also look for work that arrived without a doorbell ring.
    virtual bool WantsToRun(bool housekeeping) const = 0;
    // Called once, on an executor, after the scheduler forgot the runner.
    virtual void Finished() = 0;

    // When the scheduler last queued this runner (MonotonicNanoseconds()):
    // RunSlice's wait for an executor started then.
    int64_t queued_ns() const {
      return queued_ns_.load(std::memory_order_relaxed);
    }

   private:
    friend class DeviceScheduler;
    std::atomic<int64_t> queued_ns_{0};
  };

  // Starts `executors` (>= 1) threads for device `device`, which read ring
  // hints from and publish the device's load to `doorbell` (not owned;
  // must outlive the scheduler).
  DeviceScheduler(int device, int executors, Doorbell* doorbell);
  DeviceScheduler(const DeviceScheduler&) = delete;
  DeviceScheduler& operator=(const DeviceScheduler&) = delete;
  // Stops and joins every thread. Runners still registered are dropped
  // without Finished(): owners stop theirs first (Session::Close).
  ~DeviceScheduler();

  // Registers `runner`, queued at once so that it looks at its ring.
  void Add(std::shared_ptr<Runner> runner);

  // Waiting executors wake when `ring_fd` (a session's eventfd for this
  // device) is written, until UnwatchRing (before the fd is closed).
  absl::Status WatchRing(int ring_fd);
  void UnwatchRing(int ring_fd);
  // Queues `runner` if it is idle (a stop or drain request); a running or
  // queued runner will notice by itself.
  void Wake(Runner* runner);

  // For a runner between two commands, on an executor of this scheduler.
  // A runner of higher priority (lower value) than `priority` is queued.
  bool HigherPriorityWaiting(int priority);
  // Any runner is queued.
  bool OthersWaiting();
  // Whether a runner whose ring is empty may spin (re-check its ring for a
  // few microseconds) before it parks: only when nothing else is queued
  // here and no more executors are awake, daemon-wide, than the host has
  // cores.
  bool MaySpin();

  // Managed blocking; use BlockingRegion rather than these.
  void EnterBlocking();
  void LeaveBlocking();

  // The scheduler whose executor is the calling thread, or null.
  static DeviceScheduler* Current();
  // How long a wait should spin before it sleeps: kSpinBeforeSleep
  // (data_plane/spin_wait.h) while executors awake daemon-wide do not
  // outnumber the cores, else 0 (spinning would only take a core from a
  // thread with work).
  static absl::Duration WaitSpin();

  // What each executor thread did, by executor index (the pool's threads
  // first, then spares; an index is reused by the next thread that starts
  // after its thread exited). Counted always: two clock reads per slice.
  struct ExecutorStats {
    pid_t thread_id = 0;   // the executor thread now holding the index
    uint64_t busy_ns = 0;  // running slices
    uint64_t slices = 0;
    uint64_t sleeps = 0;    // waits on the doorbell with nothing to run
    uint64_t timeouts = 0;  // sleeps ended by the periodic check
  };
  std::vector<ExecutorStats> ExecutorSnapshot() const;

  // Time during which at least one executor of this device ran a stream
  // (the union of the executors' slices, up to now): what nvidia-smi's
  // utilization.gpu samples. Monotonic; read by UtilizationMonitor.
  uint64_t BusyNanoseconds() const;

  int device() const { return device_; }
  int executors() const { return executors_; }
  // Executor threads alive now, spares included (for tests and stats).
  int threads() const;
  // Runners registered now.
  size_t runners() const;

 private:
  enum class State { kQueued, kRunning, kIdle };
  struct ExecutorCounters {
    std::atomic<pid_t> thread_id{0};
    std::atomic<uint64_t> busy_ns{0};
    std::atomic<uint64_t> slices{0};
    std::atomic<uint64_t> sleeps{0};
    std::atomic<uint64_t> timeouts{0};
    bool in_use = false;  // guarded by the scheduler's mutex
  };
  struct Entry {
    std::shared_ptr<Runner> runner;
    State state = State::kQueued;
  };

  void ExecutorLoop();
  // An executor index for a starting thread (the lowest free one).
  ExecutorCounters* AcquireCountersLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SpawnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ReapExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void QueueLocked(Runner* runner, Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Runner* PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateBestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queues idle runners that want to run: if the hint word moved since the
  // last scan, or always when `rung` (a ring fd woke this executor) or with
  // `housekeeping` (which also looks for commands nobody rang for).
  void ScanLocked(bool housekeeping, bool rung = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Without the lock: scans only when the doorbell word moved.
  void ScanIfRung();
  // Wakes one sleeping executor (there is queued work for it): one that
  // watches the rings if any, else one on standby.
  void WakeOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Waits for work with nothing to run. The executor that ended the last
  // slice (idle or not), or the first idle one, watches the rings (epoll);
  // the others wait on standby, out of the epoll set. Says whether the
  // wait timed out (the periodic check) or a client's ring ended it; may
  // return at once, without waiting, when work came meanwhile.
  struct WaitEnd {
    bool timed_out = false;
    bool rung = false;
  };
  // `idle_timed_out`: the last wait ended idle; the team goes back.
  WaitEnd SleepLocked(bool ran_slice, bool idle_timed_out,
                      ExecutorCounters* counters)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool ExcessLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return threads_ - blocked_ > executors_;
  }

  const int device_;
  const int executors_;
  Doorbell* const doorbell_;
  // What waiting executors wait on: the sessions' ring fds, `wake_fd_`
  // (the scheduler's own wakes, edge-triggered: one executor per wake) and
  // `stop_fd_` (level-triggered and never read: once written, every wait
  // returns).
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int stop_fd_ = -1;

  mutable absl::Mutex mutex_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::unordered_map<Runner*, Entry> entries_ ABSL_GUARDED_BY(mutex_);
  std::vector<Runner*> idle_ ABSL_GUARDED_BY(mutex_);
  std::array<std::deque<Runner*>, kStreamPriorityLevels> ready_
      ABSL_GUARDED_BY(mutex_);
  size_t ready_count_ ABSL_GUARDED_BY(mutex_) = 0;
  // The best priority queued, INT_MAX when none: read without the lock at
  // every command boundary.
  std::atomic<int> best_ready_{INT_MAX};
  // The doorbell word at the last scan of idle runners.
  std::atomic<uint32_t> scanned_word_{0};

  // Threads: alive, blocked in a BlockingRegion, asleep for lack of work.
  int threads_ ABSL_GUARDED_BY(mutex_) = 0;
  int blocked_ ABSL_GUARDED_BY(mutex_) = 0;
  int sleeping_ ABSL_GUARDED_BY(mutex_) = 0;
  // Why standby: epoll wakes the executor that began waiting last, and an
  // idle executor's periodic check makes it that one, so a client's next
  // ring went to another executor than the one that ran its last slice.
  // Each executor that ran a multi-threaded kernel keeps an OpenMP team,
  // and with more team threads than cores libgomp stops spinning between
  // parallel regions (base/openmp_team.h): a single client's kernels ran
  // up to 4x slower. With the others on standby, the executor that ran a
  // client's last slice gets its next ring, and an idle one hands its team
  // back.
  int watching_ ABSL_GUARDED_BY(mutex_) = 0;  // in epoll_wait
  // The executor that ended the last slice (its counters identify it).
  const ExecutorCounters* last_slice_ ABSL_GUARDED_BY(mutex_) = nullptr;
  int standing_by_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::CondVar standby_;
  std::list<std::thread> thread_list_ ABSL_GUARDED_BY(mutex_);
  // Stable addresses: a thread keeps a pointer to its own counters.
  std::deque<ExecutorCounters> counters_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::thread::id> exited_ ABSL_GUARDED_BY(mutex_);
  // Executors running a slice now, since when at least one has, and the
  // busy time of the intervals already closed (BusyNanoseconds).
  int running_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t busy_since_ns_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t closed_busy_ns_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_DEVICE_SCHEDULER_H_
