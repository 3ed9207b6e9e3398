// The compiled modules one session loaded (loaded_module.h), by the id
// launches name them with.
//
// Contract: not thread-safe; the owning Session's one mutex guards it. It
// holds at most kMaxModulesPerSession modules; ids are never 0 and not
// reused, so a stale id is reported as unknown. Modules leave the table as
// shared_ptrs: a launch holding one keeps it loaded, and the caller drops
// the table's reference outside that lock.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_MODULE_TABLE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_MODULE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/sessions/loaded_module.h"

namespace openreg::daemon {

// Most modules one session may hold at a time (a compiled program has one
// per fused kernel).
inline constexpr size_t kMaxModulesPerSession = 16384;

class ModuleTable {
 public:
  // RESOURCE_EXHAUSTED when the table is full.
  absl::Status CheckRoom() const;
  uint64_t Add(std::shared_ptr<LoadedModule> module);
  absl::StatusOr<std::shared_ptr<LoadedModule>> Remove(uint64_t id);
  absl::StatusOr<std::shared_ptr<LoadedModule>> Find(uint64_t id) const;
  size_t size() const { return modules_.size(); }

 private:
  std::map<uint64_t, std::shared_ptr<LoadedModule>> modules_;  // by id
  uint64_t next_id_ = 1;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_MODULE_TABLE_H_
