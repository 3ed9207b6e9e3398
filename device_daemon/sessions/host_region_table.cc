#include "device_daemon/sessions/host_region_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

absl::Status HostRegionTable::CheckRoom() const {
  if (regions_.size() >= kMaxHostRegionsPerSession) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("the session already has ", kMaxHostRegionsPerSession,
                     " pinned host regions; free some (HostFree)"));
  }
  return absl::OkStatus();
}

uint32_t HostRegionTable::Add(std::shared_ptr<HostRegion> region) {
  // Ids are not reused soon, so a stale id is reported as unknown.
  uint32_t id = next_id_;
  while (id == 0 || regions_.count(id) != 0) ++id;
  next_id_ = id + 1;
  regions_.emplace(id, std::move(region));
  return id;
}

absl::StatusOr<std::shared_ptr<HostRegion>> HostRegionTable::Remove(
    uint32_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return InvalidHandleError(
        absl::StrCat("host region ", id, " is not registered in this session"));
  }
  std::shared_ptr<HostRegion> released = std::move(it->second);
  regions_.erase(it);
  return released;
}

absl::StatusOr<PinnedHostRange> HostRegionTable::PinRange(
    uint32_t id, uint64_t offset, uint64_t bytes) const {
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return InvalidHandleError(absl::StrCat(
        "host region ", id,
        " is not registered in this session (freed, or never allocated "
        "with HostAlloc)"));
  }
  const uint64_t size = it->second->size();
  if (offset > size || bytes > size - offset) {
    return InvalidValueError(
        absl::StrCat("host range [", offset, ", ", offset, " + ", bytes,
                     ") is outside host region ", id, " of ", size, " bytes"));
  }
  if (bytes == 0) return PinnedHostRange{};
  return PinnedHostRange{it->second, it->second->data() + offset};
}

}  // namespace openreg::daemon
