#include "runtime_client/freed_addresses.h"

namespace openreg::client {

bool FreedAddresses::Insert(uint64_t address) {
  absl::MutexLock lock(&mutex_);
  if (!freed_.insert(address).second) return false;
  order_.push_back(address);
  while (order_.size() > kMaxRemembered) {
    freed_.erase(order_.front());
    order_.pop_front();
  }
  return true;
}

void FreedAddresses::Erase(uint64_t address) {
  absl::MutexLock lock(&mutex_);
  // The stale entry in order_ is harmless: evicting it later at worst
  // forgets a newer free of the same address early.
  freed_.erase(address);
}

}  // namespace openreg::client
