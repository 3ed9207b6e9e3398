#include "device_daemon/kernels/kernel_workspace.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "device_daemon/base/byte_size.h"

namespace openreg::daemon {
namespace {

thread_local std::shared_ptr<KernelWorkspace::Budget> t_budget;
thread_local std::vector<KernelWorkspace::Slot>* t_slots = nullptr;

// Counted allocations by address, with their budgets. A DataPtr of this
// allocator stays "simple" (context == data) because some kernels use the
// raw allocate/deallocate interface (mkldnn's bfloat16 convolutions), so
// the bookkeeping lives here rather than in the context.
struct Counted {
  uint64_t bytes = 0;
  std::shared_ptr<KernelWorkspace::Budget> budget;  // null when placed
  bool placed = false;  // a placement slot's memory: never freed here
};

class CountedAllocations {
 public:
  void Add(void* data, uint64_t bytes,
           std::shared_ptr<KernelWorkspace::Budget> budget, bool placed) {
    absl::MutexLock lock(&mutex_);
    by_address_[data] = Counted{bytes, std::move(budget), placed};
    count_.store(by_address_.size(), std::memory_order_release);
  }
  // Forgets `data`; true when it was placed memory (not to be freed).
  bool Remove(void* data) {
    // Most frees are of uncounted memory (outside any kernel scope).
    if (count_.load(std::memory_order_acquire) == 0) return false;
    std::shared_ptr<KernelWorkspace::Budget> budget;  // released unlocked
    absl::MutexLock lock(&mutex_);
    auto found = by_address_.find(data);
    if (found == by_address_.end()) return false;
    const bool placed = found->second.placed;
    budget = std::move(found->second.budget);
    if (budget != nullptr) {
      budget->live.fetch_sub(found->second.bytes, std::memory_order_relaxed);
    }
    by_address_.erase(found);
    count_.store(by_address_.size(), std::memory_order_release);
    return placed;
  }
  bool IsPlaced(const void* data) {
    if (count_.load(std::memory_order_acquire) == 0) return false;
    absl::MutexLock lock(&mutex_);
    auto found = by_address_.find(const_cast<void*>(data));
    return found != by_address_.end() && found->second.placed;
  }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_map<void*, Counted> by_address_ ABSL_GUARDED_BY(mutex_);
  std::atomic<size_t> count_{0};
};

// Leaked on purpose (trivially destructible statics only): deleters run
// until the process ends.
CountedAllocations& CountedRegistry() {
  static auto* allocations = new CountedAllocations();
  return *allocations;
}

c10::DeleterFnPtr g_base_deleter = nullptr;

void DeleteCounted(void* data) {
  if (CountedRegistry().Remove(data)) return;  // the client's memory
  g_base_deleter(data);
}

// Counts an allocation of `bytes` in every slot of that size of the
// calling thread's placement; returns the slot it takes, if any.
KernelWorkspace::Slot* CountAndTake(size_t bytes) {
  if (t_slots == nullptr || bytes == 0) return nullptr;
  KernelWorkspace::Slot* taken = nullptr;
  for (KernelWorkspace::Slot& slot : *t_slots) {
    if (slot.bytes != bytes) continue;
    const int ordinal = slot.allocations++;
    if (taken == nullptr && !slot.taken && ordinal == slot.take_ordinal) {
      slot.taken = true;
      taken = &slot;
    }
  }
  return taken;
}

// Records where the allocation of `bytes` just counted is.
void RecordAddress(size_t bytes, const void* data) {
  if (t_slots == nullptr || bytes == 0) return;
  for (KernelWorkspace::Slot& slot : *t_slots) {
    const int ordinal = slot.allocations - 1;
    if (slot.bytes == bytes &&
        ordinal < KernelWorkspace::kRecordedAllocations) {
      slot.addresses[ordinal] = data;
    }
  }
}

class AccountingAllocator final : public c10::Allocator {
 public:
  explicit AccountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) override {
    if (KernelWorkspace::Slot* slot = CountAndTake(bytes)) {
      RecordAddress(bytes, slot->data);
      CountedRegistry().Add(slot->data, bytes, nullptr, /*placed=*/true);
      return c10::DataPtr(slot->data, slot->data, &DeleteCounted,
                          c10::Device(c10::DeviceType::CPU));
    }
    KernelWorkspace::Budget* budget = t_budget.get();
    if (budget != nullptr) {
      const uint64_t live =
          budget->live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
      if (live > budget->limit) {
        budget->live.fetch_sub(bytes, std::memory_order_relaxed);
        TORCH_CHECK_WITH(
            OutOfMemoryError, false, budget->op_name,
            budget->op_overload.empty() ? "" : ".", budget->op_overload,
            " needs more than ", FormatByteSize(budget->limit),
            " of temporary memory inside openreg-daemon (it asked for ",
            FormatByteSize(bytes), " with ", FormatByteSize(live - bytes),
            " already held): a kernel's workspace is limited to the "
            "device's memory size (openreg-daemon --kernel_workspace_limit)");
      }
    }
    c10::DataPtr base;
    try {
      base = base_->allocate(bytes);
    } catch (...) {
      if (budget != nullptr) {
        budget->live.fetch_sub(bytes, std::memory_order_relaxed);
      }
      throw;
    }
    const c10::Device device = base.device();
    void* data = base.release_context();  // ours to free with the base deleter
    if (budget != nullptr && data != nullptr) {
      CountedRegistry().Add(data, bytes, t_budget, /*placed=*/false);
    }
    RecordAddress(bytes, data);
    return c10::DataPtr(data, data, &DeleteCounted, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &DeleteCounted; }

  void copy_data(void* destination, const void* source,
                 size_t count) const override {
    default_copy_data(destination, source, count);
  }

 private:
  c10::Allocator* const base_;
};

}  // namespace

void KernelWorkspace::Install() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    // The base must hand out simple DataPtrs freed by one raw deleter (the
    // default CPU allocator does): this allocator frees through it.
    g_base_deleter = base->raw_deleter();
    if (g_base_deleter == nullptr) return;
    // Leaked on purpose: c10 keeps a raw pointer for the process lifetime.
    static auto* allocator = new AccountingAllocator(base);
    // Priority above the default CPU allocator's (0).
    c10::SetCPUAllocator(allocator, /*priority=*/1);
  });
}

KernelWorkspace::Scope::Scope(uint64_t limit_bytes, std::string_view op_name,
                              std::string_view op_overload)
    : outer_(std::move(t_budget)) {
  if (limit_bytes == 0) return;
  budget_ = std::make_shared<Budget>();
  budget_->limit = limit_bytes;
  budget_->op_name = op_name;
  budget_->op_overload = op_overload;
  t_budget = budget_;
}

KernelWorkspace::Scope::~Scope() { t_budget = std::move(outer_); }

KernelWorkspace::Placement::Placement(std::vector<Slot>* slots)
    : outer_(t_slots) {
  t_slots = slots;
}

KernelWorkspace::Placement::~Placement() { t_slots = outer_; }

bool KernelWorkspace::IsPlaced(const void* data) {
  return CountedRegistry().IsPlaced(data);
}

int KernelWorkspace::AllocationOrdinal(const Slot& slot, const void* data) {
  for (int ordinal = std::min(slot.allocations, kRecordedAllocations) - 1;
       ordinal >= 0; --ordinal) {
    if (slot.addresses[ordinal] == data) return ordinal;
  }
  return -1;
}

}  // namespace openreg::daemon
