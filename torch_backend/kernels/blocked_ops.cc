#include "torch_backend/kernels/blocked_ops.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>

namespace openreg::torch_backend {
namespace {

// Every op without an explicit kernel passes IsOpBlocked: with an empty
// list (the usual case) it costs one relaxed atomic load, no lock.
struct BlockList {
  std::mutex mutex;
  std::set<std::string> names;
  std::atomic<bool> empty{true};
};

void CheckName(std::string_view name) {
  const size_t separator = name.find("::");
  TORCH_CHECK_VALUE(separator != std::string_view::npos && separator > 0 &&
                        separator + 2 < name.size(),
                    "openreg: expected an operator name such as "
                    "\"aten::add\" or \"aten::add.Tensor\", got \"",
                    name, "\"");
}

BlockList& List() {
  // Leaked: fallbacks may run during static destruction.
  static BlockList* list = [] {
    auto* created = new BlockList();
    const char* from_env = std::getenv("OPENREG_BLOCKED_OPS");
    std::string_view remaining = from_env != nullptr ? from_env : "";
    while (!remaining.empty()) {
      const size_t comma = std::min(remaining.find(','), remaining.size());
      std::string_view name = remaining.substr(0, comma);
      remaining.remove_prefix(std::min(comma + 1, remaining.size()));
      while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      if (name.empty()) continue;
      // A malformed entry in the environment must not make every op fail:
      // it is ignored (it could never match an operator anyway).
      if (name.find("::") == std::string_view::npos) continue;
      created->names.emplace(name);
    }
    created->empty = created->names.empty();
    return created;
  }();
  return *list;
}

}  // namespace

bool IsOpBlocked(const c10::OperatorName& op) {
  BlockList& list = List();
  if (list.empty.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(list.mutex);
  if (list.names.count(op.name) != 0) return true;
  return !op.overload_name.empty() &&
         list.names.count(op.name + "." + op.overload_name) != 0;
}

void BlockOp(const std::string& name) {
  CheckName(name);
  BlockList& list = List();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.names.insert(name);
  list.empty = false;
}

bool UnblockOp(const std::string& name) {
  BlockList& list = List();
  std::lock_guard<std::mutex> lock(list.mutex);
  const bool removed = list.names.erase(name) != 0;
  list.empty = list.names.empty();
  return removed;
}

std::vector<std::string> BlockedOps() {
  BlockList& list = List();
  std::lock_guard<std::mutex> lock(list.mutex);
  return {list.names.begin(), list.names.end()};
}

}  // namespace openreg::torch_backend
