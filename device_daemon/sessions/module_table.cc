#include "device_daemon/sessions/module_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

absl::Status ModuleTable::CheckRoom() const {
  if (modules_.size() >= kMaxModulesPerSession) {
    return MakeError(
        proto::RESOURCE_EXHAUSTED,
        absl::StrCat("the session already holds ", kMaxModulesPerSession,
                     " modules; unload some (UnloadModule)"));
  }
  return absl::OkStatus();
}

uint64_t ModuleTable::Add(std::shared_ptr<LoadedModule> module) {
  const uint64_t id = next_id_++;
  modules_.emplace(id, std::move(module));
  return id;
}

absl::StatusOr<std::shared_ptr<LoadedModule>> ModuleTable::Remove(uint64_t id) {
  auto it = modules_.find(id);
  if (it == modules_.end()) {
    return InvalidHandleError(
        absl::StrCat("module ", id, " is not loaded in this session"));
  }
  std::shared_ptr<LoadedModule> released = std::move(it->second);
  modules_.erase(it);
  return released;
}

absl::StatusOr<std::shared_ptr<LoadedModule>> ModuleTable::Find(
    uint64_t id) const {
  auto it = modules_.find(id);
  if (it == modules_.end()) {
    return InvalidHandleError(absl::StrCat(
        "module ", id,
        " is not loaded in this session (unloaded, or never loaded with "
        "LoadModule)"));
  }
  return it->second;
}

}  // namespace openreg::daemon
