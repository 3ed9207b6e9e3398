#include "torch_backend/kernel_warnings.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "openreg/launch.h"

namespace openreg::torch_backend {
namespace {

// c10::SourceLocation holds pointers, and a warning may outlive this call
// (Python's handler buffers it): the few distinct file and function names
// are kept for the life of the process.
const char* Interned(const std::string& text) {
  static absl::Mutex mutex;
  static auto* names = new absl::node_hash_set<std::string>();
  absl::MutexLock lock(&mutex);
  if (names->size() >= 4096 && !names->contains(text)) return "<daemon>";
  return names->insert(text).first->c_str();
}

// Source locations of the daemon kernels' TORCH_WARN_ONCE warnings
// (KernelWarning.once), by interned file and line: "once" is decided here,
// per client process, as CPU decides it per process.
struct OnceSites {
  absl::Mutex mutex;
  // false: known, not raised yet in this process.
  absl::flat_hash_map<std::pair<const char*, uint32_t>, bool> raised
      ABSL_GUARDED_BY(mutex);
};

OnceSites& Once() {
  static auto* sites = new OnceSites();
  return *sites;
}

void NoteOnceSite(const c10::SourceLocation& where) {
  OnceSites& sites = Once();
  absl::MutexLock lock(&sites.mutex);
  sites.raised.try_emplace({where.file, where.line}, false);
}

// False for a once-warning already raised in this process (unless
// torch.set_warn_always(True)); marks it raised otherwise.
bool ShouldRaise(const c10::Warning& warning) {
  const c10::SourceLocation& where = warning.source_location();
  OnceSites& sites = Once();
  absl::MutexLock lock(&sites.mutex);
  auto site = sites.raised.find({where.file, where.line});
  if (site == sites.raised.end()) return true;
  if (c10::WarningUtils::get_warnAlways()) return true;
  const bool first = !site->second;
  site->second = true;
  return first;
}

// Warnings raised at the call from a signature's cached reply
// (RaiseWarningsAtCall), by file, line and message.
struct RaisedAtCall {
  absl::Mutex mutex;
  absl::flat_hash_set<std::string> keys ABSL_GUARDED_BY(mutex);
};

RaisedAtCall& AtCall() {
  static auto* raised = new RaisedAtCall();
  return *raised;
}

std::string WarningKey(const c10::Warning& warning) {
  const c10::SourceLocation& where = warning.source_location();
  return absl::StrCat(where.file == nullptr ? "" : where.file, ":", where.line,
                      ":", warning.msg());
}

template <typename Warnings>
std::vector<c10::Warning> ToC10Warnings(const Warnings& kernel_warnings) {
  std::vector<c10::Warning> warnings;
  for (const proto::KernelWarning& warning : kernel_warnings) {
    const c10::SourceLocation where{Interned(warning.function()),
                                    Interned(warning.file()), warning.line()};
    if (warning.once()) NoteOnceSite(where);
    c10::Warning::warning_variant_t type = c10::UserWarning();
    if (warning.deprecation()) type = c10::DeprecationWarning();
    warnings.emplace_back(type, where, warning.message(), /*verbatim=*/false);
  }
  return warnings;
}

}  // namespace

std::vector<c10::Warning> KernelWarnings(const proto::OpReply& reply) {
  return ToC10Warnings(reply.warnings());
}

void RaisePendingKernelWarnings() {
  std::vector<proto::KernelWarning> pending;
  uint64_t dropped = 0;
  TakeKernelWarnings(&pending, &dropped);
  if (!pending.empty()) {
    std::vector<c10::Warning> warnings = ToC10Warnings(pending);
    {
      RaisedAtCall& at_call = AtCall();
      absl::MutexLock lock(&at_call.mutex);
      warnings.erase(
          std::remove_if(warnings.begin(), warnings.end(),
                         [&](const c10::Warning& warning) {
                           return at_call.keys.contains(WarningKey(warning));
                         }),
          warnings.end());
    }
    RaiseWarnings(warnings);
  }
  if (dropped != 0) {
    TORCH_WARN("openreg: ", dropped,
               " warnings of asynchronous kernels "
               "were dropped (a stream's warning mailbox was full)");
  }
}

void RaiseWarnings(const std::vector<c10::Warning>& warnings) {
  for (const c10::Warning& warning : warnings) {
    if (ShouldRaise(warning)) c10::warn(warning);
  }
}

void RaiseWarningsAtCall(const std::vector<c10::Warning>& warnings) {
  if (!warnings.empty()) {
    RaisedAtCall& at_call = AtCall();
    absl::MutexLock lock(&at_call.mutex);
    for (const c10::Warning& warning : warnings) {
      // Bounded: beyond it, a mailbox copy may be raised again.
      if (at_call.keys.size() < 4096) at_call.keys.insert(WarningKey(warning));
    }
  }
  RaiseWarnings(warnings);
}

}  // namespace openreg::torch_backend
