#include "device_daemon/devices/device_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "data_plane/futex.h"
#include "data_plane/spin_wait.h"

namespace openreg::daemon {
namespace {

// How long an executor with nothing to run sleeps before it looks at idle
// runners' rings (housekeeping) and, if it is a spare nobody needs, exits.
constexpr absl::Duration kIdleWait = absl::Milliseconds(100);

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
    doorbell_->word.fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(&doorbell_->word);
    auto all_exited = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return threads_ == 0;
    };
    mutex_.Await(absl::Condition(&all_exited));
    threads.swap(thread_list_);
    exited_.clear();
    entries_.clear();
  }
  for (std::thread& thread : threads) thread.join();
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
  // Moving the word makes a sleeper's FutexWait return (or not start).
  // When no client rang since the last scan, the scan mark moves along, so
  // that this daemon-side wake does not cost a needless scan.
  const uint32_t before =
      doorbell_->word.fetch_add(1, std::memory_order_seq_cst);
  if (scanned_word_.load(std::memory_order_relaxed) == before) {
    scanned_word_.store(before + 1, std::memory_order_relaxed);
  }
  FutexWakeOne(&doorbell_->word);
}

void DeviceScheduler::ScanLocked(bool housekeeping) {
  const uint32_t word = doorbell_->word.load(std::memory_order_seq_cst);
  if (!housekeeping && word == scanned_word_.load(std::memory_order_relaxed)) {
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
  g_awake.fetch_add(1, std::memory_order_relaxed);
  mutex_.Lock();
  while (true) {
    Runner* next = nullptr;
    bool timed_out = false;
    while (!stopping_) {
      ScanLocked(/*housekeeping=*/timed_out);
      next = PopLocked();
      if (next != nullptr) break;
      if (timed_out && ExcessLocked()) break;  // a spare nobody needs
      // Nothing to run: sleep until a doorbell ring (a client's or ours)
      // moves the word past what the last scan saw.
      const uint32_t word = scanned_word_.load(std::memory_order_relaxed);
      ++sleeping_;
      mutex_.Unlock();
      g_awake.fetch_sub(1, std::memory_order_relaxed);
      const absl::Time deadline = absl::Now() + kIdleWait;
      FutexWait(&doorbell_->word, word, kIdleWait);
      g_awake.fetch_add(1, std::memory_order_relaxed);
      mutex_.Lock();
      --sleeping_;
      timed_out = absl::Now() >= deadline;
    }
    if (next == nullptr) break;
    // More queued than this thread takes: hand it to a sleeper.
    if (ready_count_ > 0 && sleeping_ > 0) WakeOneLocked();
    Entry& entry = entries_[next];
    entry.state = State::kRunning;
    std::shared_ptr<Runner> runner = entry.runner;
    mutex_.Unlock();
    const Runner::Outcome outcome = runner->RunSlice(this);
    mutex_.Lock();
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
  exited_.push_back(std::this_thread::get_id());
  mutex_.Unlock();
  g_awake.fetch_sub(1, std::memory_order_relaxed);
  t_current = nullptr;
}

}  // namespace openreg::daemon
