#include "data_plane/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace openreg {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "futex words must be plain 32-bit integers");

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value,
           const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 timeout, nullptr, 0);
}

}  // namespace

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  timespec relative = absl::ToTimespec(timeout);
  Futex(word, FUTEX_WAIT, expected, &relative);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  Futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

void FutexWakeOne(std::atomic<uint32_t>* word) {
  Futex(word, FUTEX_WAKE, 1, nullptr);
}

}  // namespace openreg
