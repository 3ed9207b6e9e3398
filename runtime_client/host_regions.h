// The process's pinned host allocations (HostAlloc): where each one is
// mapped and which daemon region it is. Copies look their host side up
// here; a hit means the daemon can copy directly from or to that memory.
//
// Each entry remembers the session that registered it: after Shutdown()
// and a new attach, the memory stays mapped in this process (the caller
// still owns it) but the new session does not know the region, so copies
// fall back to staging.
#ifndef OPENREG_RUNTIME_CLIENT_HOST_REGIONS_H_
#define OPENREG_RUNTIME_CLIENT_HOST_REGIONS_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace openreg::client {

class Session;

// Identifies one attached session (ids restart with a new daemon; the
// token does not repeat).
struct SessionKey {
  uint64_t id = 0;
  uint64_t token = 0;
  bool operator==(const SessionKey& other) const {
    return id == other.id && token == other.token;
  }
};

SessionKey KeyOf(const Session& session);

struct HostRegionEntry {
  char* base = nullptr;
  uint64_t size = 0;    // bytes requested
  uint64_t mapped = 0;  // bytes mapped (page-rounded)
  uint32_t region = 0;  // the daemon's id
  SessionKey session;
};

class HostRegions {
 public:
  static HostRegions& Get();

  void Add(const HostRegionEntry& entry);
  // Removes the allocation starting exactly at `base`.
  std::optional<HostRegionEntry> Remove(const void* base);
  // The allocation containing [pointer, pointer + bytes), if any.
  std::optional<HostRegionEntry> Find(const void* pointer,
                                      uint64_t bytes) const;
  // Find, limited to regions `session` registered.
  std::optional<HostRegionEntry> FindInSession(const Session& session,
                                               const void* pointer,
                                               uint64_t bytes) const;

 private:
  HostRegions() = default;

  mutable absl::Mutex mutex_;
  std::map<uintptr_t, HostRegionEntry> by_base_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_HOST_REGIONS_H_
