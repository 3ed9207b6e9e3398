#include "runtime_client/sync_timeout.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "openreg/runtime.h"
#include "runtime_client/status_util.h"
#include "runtime_client/thread_state.h"

namespace openreg {
namespace client {
namespace {

constexpr int64_t kNone = 0;

// Nanoseconds; 0 = no limit.
std::atomic<int64_t>& TimeoutNs() {
  static std::atomic<int64_t> timeout_ns = [] {
    const char* text = std::getenv("OPENREG_SYNC_TIMEOUT");
    double seconds = 0;
    if (text == nullptr || *text == '\0') return kNone;
    if (!absl::SimpleAtod(text, &seconds) || !std::isfinite(seconds) ||
        seconds < 0) {
      std::fprintf(stderr,
                   "openreg: ignoring OPENREG_SYNC_TIMEOUT=%s (expected a "
                   "number of seconds >= 0)\n",
                   text);
      return kNone;
    }
    return static_cast<int64_t>(seconds * 1e9);
  }();
  return timeout_ns;
}

}  // namespace

absl::Duration SyncTimeout() {
  const int64_t ns = TimeoutNs().load(std::memory_order_relaxed);
  return ns == kNone ? absl::InfiniteDuration() : absl::Nanoseconds(ns);
}

}  // namespace client

Error SetSyncTimeout(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    return client::ReturnStatus(client::MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: SetSyncTimeout(", seconds,
                     "): expected a number of seconds >= 0 (0: no limit)")));
  }
  client::TimeoutNs().store(static_cast<int64_t>(seconds * 1e9),
                            std::memory_order_relaxed);
  return Error::kSuccess;
}

double GetSyncTimeout() {
  return static_cast<double>(
             client::TimeoutNs().load(std::memory_order_relaxed)) /
         1e9;
}

}  // namespace openreg
