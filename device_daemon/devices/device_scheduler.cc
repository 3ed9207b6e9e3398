#include "device_daemon/devices/device_scheduler.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/monotonic_clock.h"
#include "data_plane/spin_wait.h"
#include "device_daemon/base/openmp_team.h"
#include "device_daemon/base/openmp_worker_placement.h"
#include "device_daemon/base/thread_cpu.h"

namespace openreg::daemon {
namespace {

// How long an executor with nothing to run sleeps before it looks at idle
// runners' rings (housekeeping) and, if it is a spare nobody needs, exits.
constexpr int kIdleWaitMilliseconds = 100;
// epoll data of the scheduler's own fds; a ring fd's data is the fd.
constexpr uint64_t kWakeEvent = ~0ull;
constexpr uint64_t kStopEvent = ~0ull - 1;

void WriteEventFd(int fd) {
  const uint64_t one = 1;
  while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

// Executor threads of every device that are neither asleep nor blocked: the
// threads competing for the host's cores.
std::atomic<int> g_awake{0};

int Cores() {
  static const int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

thread_local DeviceScheduler* t_current = nullptr;

int QueueIndex(int priority) {
  return ClampStreamPriority(priority) - kGreatestStreamPriority;
}

}  // namespace

DeviceScheduler::DeviceScheduler(int device, int executors, Doorbell* doorbell)
    : device_(device), executors_(std::max(1, executors)), doorbell_(doorbell) {
  // Without these the daemon cannot run at all; the fd limit is the only
  // plausible cause, and the daemon checks it before creating devices.
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event wake{};
  wake.events = EPOLLIN | EPOLLET;
  wake.data.u64 = kWakeEvent;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.u64 = kStopEvent;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd_, &stop);
  absl::MutexLock lock(&mutex_);
  scanned_word_.store(doorbell_->word.load(std::memory_order_acquire),
                      std::memory_order_relaxed);
  for (int i = 0; i < executors_; ++i) SpawnLocked();
}

DeviceScheduler::~DeviceScheduler() {
  std::list<std::thread> threads;
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    WriteEventFd(stop_fd_);
    standby_.SignalAll();
    auto all_exited = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return threads_ == 0;
    };
    mutex_.Await(absl::Condition(&all_exited));
    threads.swap(thread_list_);
    exited_.clear();
    entries_.clear();
  }
  for (std::thread& thread : threads) thread.join();
  for (int fd : {epoll_fd_, wake_fd_, stop_fd_}) {
    if (fd >= 0) close(fd);
  }
}

absl::Status DeviceScheduler::WatchRing(int ring_fd) {
  epoll_event ring{};
  ring.events = EPOLLIN | EPOLLET;
  ring.data.u64 = static_cast<uint64_t>(ring_fd);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ring_fd, &ring) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("watching a ring fd on "
                                                   "openreg:",
                                                   device_));
  }
  return absl::OkStatus();
}

void DeviceScheduler::UnwatchRing(int ring_fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, ring_fd, nullptr);
}

DeviceScheduler* DeviceScheduler::Current() { return t_current; }

absl::Duration DeviceScheduler::WaitSpin() {
  return g_awake.load(std::memory_order_relaxed) <= Cores()
             ? kSpinBeforeSleep
             : absl::ZeroDuration();
}

int DeviceScheduler::threads() const {
  absl::MutexLock lock(&mutex_);
  return threads_;
}

size_t DeviceScheduler::runners() const {
  absl::MutexLock lock(&mutex_);
  return entries_.size();
}

uint64_t DeviceScheduler::BusyNanoseconds() const {
  absl::MutexLock lock(&mutex_);
  if (running_ == 0) return closed_busy_ns_;
  return closed_busy_ns_ +
         static_cast<uint64_t>(MonotonicNanoseconds() - busy_since_ns_);
}

std::vector<DeviceScheduler::ExecutorStats> DeviceScheduler::ExecutorSnapshot()
    const {
  absl::MutexLock lock(&mutex_);
  std::vector<ExecutorStats> stats;
  stats.reserve(counters_.size());
  for (const ExecutorCounters& counters : counters_) {
    ExecutorStats& entry = stats.emplace_back();
    entry.thread_id = counters.thread_id.load(std::memory_order_relaxed);
    entry.busy_ns = counters.busy_ns.load(std::memory_order_relaxed);
    entry.slices = counters.slices.load(std::memory_order_relaxed);
    entry.sleeps = counters.sleeps.load(std::memory_order_relaxed);
    entry.timeouts = counters.timeouts.load(std::memory_order_relaxed);
  }
  return stats;
}

DeviceScheduler::ExecutorCounters* DeviceScheduler::AcquireCountersLocked() {
  for (ExecutorCounters& counters : counters_) {
    if (!counters.in_use) {
      counters.in_use = true;
      return &counters;
    }
  }
  ExecutorCounters& counters = counters_.emplace_back();
  counters.in_use = true;
  return &counters;
}

void DeviceScheduler::SpawnLocked() {
  ReapExitedLocked();
  ++threads_;
  thread_list_.emplace_back([this] { ExecutorLoop(); });
}

void DeviceScheduler::ReapExitedLocked() {
  // An exited thread has released the mutex for the last time: joining it
  // here only waits for its return.
  for (std::thread::id id : exited_) {
    for (auto it = thread_list_.begin(); it != thread_list_.end(); ++it) {
      if (it->get_id() == id) {
        it->join();
        thread_list_.erase(it);
        break;
      }
    }
  }
  exited_.clear();
}

void DeviceScheduler::UpdateBestLocked() {
  int best = INT_MAX;
  for (int i = 0; i < kStreamPriorityLevels; ++i) {
    if (!ready_[i].empty()) {
      best = i + kGreatestStreamPriority;
      break;
    }
  }
  best_ready_.store(best, std::memory_order_release);
  doorbell_->queued_streams.store(static_cast<uint32_t>(ready_count_),
                                  std::memory_order_relaxed);
}

void DeviceScheduler::QueueLocked(Runner* runner, Entry& entry) {
  entry.state = State::kQueued;
  runner->queued_ns_.store(MonotonicNanoseconds(), std::memory_order_relaxed);
  ready_[QueueIndex(runner->priority())].push_back(runner);
  ++ready_count_;
  UpdateBestLocked();
}

DeviceScheduler::Runner* DeviceScheduler::PopLocked() {
  if (ready_count_ == 0) return nullptr;
  for (auto& queue : ready_) {
    if (queue.empty()) continue;
    Runner* runner = queue.front();
    queue.pop_front();
    --ready_count_;
    UpdateBestLocked();
    return runner;
  }
  return nullptr;
}

void DeviceScheduler::WakeOneLocked() {
  if (watching_ == 0 && standing_by_ > 0) {
    standby_.Signal();
    return;
  }
  // Edge-triggered: one waiting executor gets it, or the next one to wait
  // if none waits yet.
  WriteEventFd(wake_fd_);
}

DeviceScheduler::WaitEnd DeviceScheduler::SleepLocked(
    bool ran_slice, bool idle_timed_out, ExecutorCounters* counters) {
  WaitEnd end;
  // The executor that ended the last slice watches, idle or not.
  const bool watch = ran_slice || last_slice_ == counters;
  // Idle for a while (base/openmp_team.h), or going on standby, away from
  // clients' work (see watching_): the OpenMP team goes back first, then
  // look again, as the lock was let go (nobody wakes a thread that does
  // not sleep yet).
  if (idle_timed_out || (!watch && watching_ > 0)) {
    mutex_.Unlock();
    ReleaseOpenMpTeam();
    // Held on one CPU while it had a team (base/openmp_worker_placement.h).
    LetThisThreadRunAnywhere();
    mutex_.Lock();
    if (stopping_ || ready_count_ > 0) return end;
  }
  ++sleeping_;
  g_awake.fetch_sub(1, std::memory_order_relaxed);
  if (watch || watching_ == 0) {
    ++watching_;
    mutex_.Unlock();
    epoll_event events[16];
    const int ready = epoll_wait(epoll_fd_, events, 16, kIdleWaitMilliseconds);
    mutex_.Lock();
    --watching_;
    end.timed_out = ready == 0;
    for (int i = 0; i < ready; ++i) {
      end.rung = end.rung || events[i].data.u64 < kStopEvent;
    }
  } else {
    ++standing_by_;
    end.timed_out =
        !stopping_ && standby_.WaitWithTimeout(
                          &mutex_, absl::Milliseconds(kIdleWaitMilliseconds));
    --standing_by_;
  }
  g_awake.fetch_add(1, std::memory_order_relaxed);
  --sleeping_;
  counters->sleeps.fetch_add(1, std::memory_order_relaxed);
  if (end.timed_out) {
    counters->timeouts.fetch_add(1, std::memory_order_relaxed);
  }
  return end;
}

void DeviceScheduler::ScanLocked(bool housekeeping, bool rung) {
  const uint32_t word = doorbell_->word.load(std::memory_order_seq_cst);
  if (!housekeeping && !rung &&
      word == scanned_word_.load(std::memory_order_relaxed)) {
    return;
  }
  scanned_word_.store(word, std::memory_order_release);
  for (size_t i = 0; i < idle_.size();) {
    Runner* runner = idle_[i];
    if (runner->WantsToRun(housekeeping)) {
      idle_[i] = idle_.back();
      idle_.pop_back();
      QueueLocked(runner, entries_[runner]);
    } else {
      ++i;
    }
  }
}

void DeviceScheduler::ScanIfRung() {
  if (doorbell_->word.load(std::memory_order_acquire) ==
      scanned_word_.load(std::memory_order_acquire)) {
    return;
  }
  absl::MutexLock lock(&mutex_);
  ScanLocked(/*housekeeping=*/false);
}

bool DeviceScheduler::HigherPriorityWaiting(int priority) {
  ScanIfRung();
  return best_ready_.load(std::memory_order_acquire) < priority;
}

bool DeviceScheduler::OthersWaiting() {
  ScanIfRung();
  return best_ready_.load(std::memory_order_acquire) != INT_MAX;
}

bool DeviceScheduler::MaySpin() {
  return !OthersWaiting() && g_awake.load(std::memory_order_relaxed) <= Cores();
}

void DeviceScheduler::Add(std::shared_ptr<Runner> runner) {
  absl::MutexLock lock(&mutex_);
  Runner* key = runner.get();
  Entry& entry = entries_[key];
  entry.runner = std::move(runner);
  QueueLocked(key, entry);
  if (sleeping_ > 0) WakeOneLocked();
}

void DeviceScheduler::Wake(Runner* runner) {
  absl::MutexLock lock(&mutex_);
  auto it = entries_.find(runner);
  if (it == entries_.end() || it->second.state != State::kIdle) return;
  idle_.erase(std::find(idle_.begin(), idle_.end(), runner));
  QueueLocked(runner, it->second);
  if (sleeping_ > 0) WakeOneLocked();
}

void DeviceScheduler::EnterBlocking() {
  g_awake.fetch_sub(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  ++blocked_;
  if (stopping_) return;
  if (threads_ - blocked_ < executors_) {
    SpawnLocked();
  } else if (ready_count_ > 0 && sleeping_ > 0) {
    WakeOneLocked();
  }
}

void DeviceScheduler::LeaveBlocking() {
  g_awake.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mutex_);
  --blocked_;
  // One thread too many now; the first to find itself idle for a while
  // exits (ExecutorLoop), so a burst of blocking does not churn threads.
}

void DeviceScheduler::ExecutorLoop() {
  t_current = this;
  // Named before its OpenMP workers start: they inherit the name.
  NameThisThread(absl::StrCat(kExecutorName, device_));
  g_awake.fetch_add(1, std::memory_order_relaxed);
  mutex_.Lock();
  ExecutorCounters* const counters = AcquireCountersLocked();
  counters->thread_id.store(ThisThreadId(), std::memory_order_relaxed);
  bool ran_slice = false;
  while (true) {
    Runner* next = nullptr;
    bool timed_out = false;
    bool rung = false;
    while (!stopping_) {
      ScanLocked(/*housekeeping=*/timed_out, rung);
      next = PopLocked();
      if (next != nullptr) break;
      if (timed_out && ExcessLocked()) break;  // a spare nobody needs
      // Nothing to run: wait for a ring (a client's fd or our own wake).
      // A ring written before this wait is still pending in the epoll set.
      const WaitEnd end = SleepLocked(ran_slice, timed_out, counters);
      timed_out = end.timed_out;
      rung = end.rung;
      ran_slice = false;
    }
    if (next == nullptr) break;
    ran_slice = true;
    // More queued than this thread takes: hand it to a sleeper; and while
    // this thread runs, one must watch the rings.
    if ((ready_count_ > 0 || watching_ == 0) && sleeping_ > 0) {
      WakeOneLocked();
    }
    Entry& entry = entries_[next];
    entry.state = State::kRunning;
    std::shared_ptr<Runner> runner = entry.runner;
    const int64_t slice_start = MonotonicNanoseconds();
    if (running_++ == 0) busy_since_ns_ = slice_start;
    mutex_.Unlock();
    const Runner::Outcome outcome = runner->RunSlice(this);
    const int64_t slice_end = MonotonicNanoseconds();
    counters->busy_ns.fetch_add(static_cast<uint64_t>(slice_end - slice_start),
                                std::memory_order_relaxed);
    counters->slices.fetch_add(1, std::memory_order_relaxed);
    mutex_.Lock();
    last_slice_ = counters;
    if (--running_ == 0) {
      closed_busy_ns_ += static_cast<uint64_t>(slice_end - busy_since_ns_);
    }
    switch (outcome) {
      case Runner::Outcome::kYield:
        QueueLocked(next, entries_[next]);
        break;
      case Runner::Outcome::kParked: {
        // A client that cleared `parked` before the runner was idle rang a
        // doorbell this scan may already have consumed: ask now.
        Entry& parked = entries_[next];
        if (next->WantsToRun(/*housekeeping=*/false)) {
          QueueLocked(next, parked);
        } else {
          parked.state = State::kIdle;
          idle_.push_back(next);
        }
        break;
      }
      case Runner::Outcome::kFinished:
        entries_.erase(next);
        mutex_.Unlock();
        // Forgotten first: the owner may free what the runner points to
        // once Finished() returns; this reference keeps the runner itself.
        runner->Finished();
        runner.reset();
        mutex_.Lock();
        break;
    }
  }
  --threads_;
  counters->in_use = false;
  counters->thread_id.store(0, std::memory_order_relaxed);
  exited_.push_back(std::this_thread::get_id());
  mutex_.Unlock();
  g_awake.fetch_sub(1, std::memory_order_relaxed);
  t_current = nullptr;
}

}  // namespace openreg::daemon
