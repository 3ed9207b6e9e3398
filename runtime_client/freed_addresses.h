// Remembers device addresses this process freed, so that a second Free of
// the same pointer fails at once with kInvalidValue instead of surfacing
// later as an asynchronous error on the default stream. Only definite
// double frees are caught: an address leaves the set as soon as the daemon
// hands it out again (Malloc or a synchronous op's result).
#ifndef OPENREG_RUNTIME_CLIENT_FREED_ADDRESSES_H_
#define OPENREG_RUNTIME_CLIENT_FREED_ADDRESSES_H_

#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace openreg::client {

class FreedAddresses {
 public:
  // Records a free. Returns false when `address` was already freed.
  bool Insert(uint64_t address);
  // The daemon returned `address` as live memory again.
  void Erase(uint64_t address);

 private:
  // Bounded memory: the oldest entries are forgotten first.
  static constexpr size_t kMaxRemembered = 1 << 16;

  absl::Mutex mutex_;
  absl::flat_hash_set<uint64_t> freed_ ABSL_GUARDED_BY(mutex_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_FREED_ADDRESSES_H_
