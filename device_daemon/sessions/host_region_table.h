// The pinned host regions one session registered (memory/host_region.h),
// by the id copy commands name them with.
//
// Contract: not thread-safe; the owning Session's one mutex guards it. It
// holds at most kMaxHostRegionsPerSession regions; ids are never 0 and are
// not reused soon, so a stale id is reported as unknown. Regions leave the
// table as shared_ptrs: a command holding one (PinnedHostRange) keeps it
// mapped, and the caller drops the table's reference outside that lock.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_HOST_REGION_TABLE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_HOST_REGION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/memory/host_region.h"

namespace openreg::daemon {

// Bytes of a pinned host region a command may use, kept mapped for as long
// as this object exists even if the region is unregistered meanwhile.
struct PinnedHostRange {
  std::shared_ptr<HostRegion> region;  // null for an empty range
  char* data = nullptr;
};

// Most host regions one session may register at a time.
inline constexpr size_t kMaxHostRegionsPerSession = 4096;

class HostRegionTable {
 public:
  // RESOURCE_EXHAUSTED when the table already holds
  // kMaxHostRegionsPerSession regions.
  absl::Status CheckRoom() const;
  // Adds a region mapped by the caller; returns its id (never 0).
  uint32_t Add(std::shared_ptr<HostRegion> region);
  // Removes region `id` and returns it.
  absl::StatusOr<std::shared_ptr<HostRegion>> Remove(uint32_t id);
  // OK when [offset, offset + bytes) lies inside region `id`. An empty
  // range is always valid.
  absl::StatusOr<PinnedHostRange> PinRange(uint32_t id, uint64_t offset,
                                           uint64_t bytes) const;
  size_t size() const { return regions_.size(); }

 private:
  std::map<uint32_t, std::shared_ptr<HostRegion>> regions_;  // by id
  uint32_t next_id_ = 1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_HOST_REGION_TABLE_H_
