// How many commands may block at once in a wait for other streams' work
// or for an interprocess event (WaitStream, the fences of a stream-ordered
// free, WaitIpcEvent), per session and daemon-wide. Each such wait holds
// an executor, and the device starts a spare thread in its place
// (devices/blocking_region.h), so without a bound one client could make
// the daemon's thread count grow with the number of its waits. A wait
// beyond a limit fails at once with RESOURCE_EXHAUSTED naming the limit;
// the stream reports it at its next synchronization, as any failed
// command.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_WAIT_BUDGET_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_WAIT_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace openreg::daemon {

struct WaitLimits {
  uint32_t per_session = 32;  // --max_blocked_waits_per_session
  uint32_t total = 512;       // --max_blocked_waits
};

class WaitBudget {
 public:
  // A blocked wait counted against the budget while it lives.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    ~Ticket();

   private:
    friend class WaitBudget;
    Ticket(WaitBudget* budget, uint64_t session_id)
        : budget_(budget), session_id_(session_id) {}
    WaitBudget* budget_;
    uint64_t session_id_;
  };

  explicit WaitBudget(WaitLimits limits = WaitLimits()) : limits_(limits) {}
  void SetLimits(WaitLimits limits);

  // A ticket for one more blocked wait of `session_id`, or
  // RESOURCE_EXHAUSTED naming the limit it would pass.
  absl::StatusOr<Ticket> Acquire(uint64_t session_id);

  uint32_t blocked() const;

 private:
  void Release(uint64_t session_id);

  mutable absl::Mutex mutex_;
  WaitLimits limits_ ABSL_GUARDED_BY(mutex_);
  uint32_t total_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<uint64_t, uint32_t> by_session_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_WAIT_BUDGET_H_
