#include "runtime_client/host_regions.h"

#include "runtime_client/session.h"

namespace openreg::client {

SessionKey KeyOf(const Session& session) {
  proto::SessionRef ref;
  session.FillRef(&ref);
  return SessionKey{ref.session_id(), ref.token()};
}

HostRegions& HostRegions::Get() {
  // Never destroyed: copies may look up regions during static teardown.
  static HostRegions* regions = new HostRegions();
  return *regions;
}

void HostRegions::Add(const HostRegionEntry& entry) {
  absl::MutexLock lock(&mutex_);
  by_base_[reinterpret_cast<uintptr_t>(entry.base)] = entry;
}

std::optional<HostRegionEntry> HostRegions::Remove(const void* base) {
  absl::MutexLock lock(&mutex_);
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  if (it == by_base_.end()) return std::nullopt;
  HostRegionEntry entry = it->second;
  by_base_.erase(it);
  return entry;
}

std::optional<HostRegionEntry> HostRegions::Find(const void* pointer,
                                                 uint64_t bytes) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  absl::ReaderMutexLock lock(&mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return std::nullopt;
  --it;
  const HostRegionEntry& entry = it->second;
  const uint64_t offset = address - it->first;
  if (offset >= entry.size || bytes > entry.size - offset) return std::nullopt;
  return entry;
}

std::optional<HostRegionEntry> HostRegions::FindInSession(
    const Session& session, const void* pointer, uint64_t bytes) const {
  std::optional<HostRegionEntry> entry = Find(pointer, bytes);
  if (!entry.has_value() || !(entry->session == KeyOf(session))) {
    return std::nullopt;
  }
  return entry;
}

}  // namespace openreg::client
