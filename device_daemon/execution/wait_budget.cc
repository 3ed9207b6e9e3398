#include "device_daemon/execution/wait_budget.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

WaitBudget::Ticket::Ticket(Ticket&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      session_id_(other.session_id_) {}

WaitBudget::Ticket::~Ticket() {
  if (budget_ != nullptr) budget_->Release(session_id_);
}

void WaitBudget::SetLimits(WaitLimits limits) {
  absl::MutexLock lock(&mutex_);
  limits_ = limits;
}

absl::StatusOr<WaitBudget::Ticket> WaitBudget::Acquire(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  uint32_t& mine = by_session_[session_id];
  if (mine >= limits_.per_session) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat(mine,
                     " commands of this process already wait for other "
                     "streams or events, the most a process may block at "
                     "once (openreg-daemon --max_blocked_waits_per_session): "
                     "each holds a daemon thread"));
  }
  if (total_ >= limits_.total) {
    if (mine == 0) by_session_.erase(session_id);
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat(total_,
                     " commands of all processes already wait for other "
                     "streams or events, the most the daemon blocks at once "
                     "(openreg-daemon --max_blocked_waits): each holds a "
                     "daemon thread"));
  }
  ++mine;
  ++total_;
  return Ticket(this, session_id);
}

void WaitBudget::Release(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  --total_;
  auto mine = by_session_.find(session_id);
  if (mine != by_session_.end() && --mine->second == 0) {
    by_session_.erase(mine);
  }
}

uint32_t WaitBudget::blocked() const {
  absl::MutexLock lock(&mutex_);
  return total_;
}

}  // namespace openreg::daemon
