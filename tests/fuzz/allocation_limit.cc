#include "tests/fuzz/allocation_limit.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define OPENREG_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OPENREG_SANITIZER_ALLOCATOR 1
#endif

namespace openreg::fuzz {
namespace {

std::atomic<bool> armed{false};
std::atomic<size_t> largest{0};
std::atomic<size_t> count{0};
// Signed: memory allocated before the scope may be freed inside it.
std::atomic<long long> live{0};
std::atomic<long long> peak_live{0};

void RaiseTo(std::atomic<size_t>& value, size_t candidate) {
  size_t seen = value.load(std::memory_order_relaxed);
  while (candidate > seen && !value.compare_exchange_weak(
                                 seen, candidate, std::memory_order_relaxed)) {
  }
}

void RaiseTo(std::atomic<long long>& value, long long candidate) {
  long long seen = value.load(std::memory_order_relaxed);
  while (candidate > seen && !value.compare_exchange_weak(
                                 seen, candidate, std::memory_order_relaxed)) {
  }
}

void Allocated(size_t size) {
  if (!armed.load(std::memory_order_relaxed)) return;
  count.fetch_add(1, std::memory_order_relaxed);
  RaiseTo(largest, size);
  const long long now =
      live.fetch_add(static_cast<long long>(size), std::memory_order_relaxed) +
      static_cast<long long>(size);
  RaiseTo(peak_live, now);
}

void Freed(size_t size) {
  if (!armed.load(std::memory_order_relaxed)) return;
  live.fetch_sub(static_cast<long long>(size), std::memory_order_relaxed);
}

}  // namespace

AllocationScope::AllocationScope() {
  largest = 0;
  count = 0;
  live = 0;
  peak_live = 0;
  armed.store(true, std::memory_order_seq_cst);
}

AllocationScope::~AllocationScope() {
  armed.store(false, std::memory_order_seq_cst);
}

AllocationStats AllocationScope::Stats() const {
  AllocationStats stats;
  stats.largest = largest.load();
  stats.count = count.load();
  const long long peak = peak_live.load();
  stats.peak_live = peak > 0 ? static_cast<size_t>(peak) : 0;
  return stats;
}

}  // namespace openreg::fuzz

#if defined(OPENREG_SANITIZER_ALLOCATOR)

// The sanitizer's allocator calls these for every malloc and operator new
// (sanitizer/allocator_interface.h, not shipped with gcc's headers).
extern "C" int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void*, size_t),
    void (*free_hook)(const volatile void*));
extern "C" size_t __sanitizer_get_allocated_size(const volatile void* p);

namespace openreg::fuzz {
namespace {

void MallocHook(const volatile void*, size_t size) { Allocated(size); }

void FreeHook(const volatile void* p) {
  if (p != nullptr) Freed(__sanitizer_get_allocated_size(p));
}

const bool hooks_installed =
    __sanitizer_install_malloc_and_free_hooks(MallocHook, FreeHook) != 0;

}  // namespace

bool AllocationsObservable() { return hooks_installed; }

}  // namespace openreg::fuzz

#else  // !OPENREG_SANITIZER_ALLOCATOR

// A plain build: every operator new of the process comes here. (malloc
// itself is not counted; the code under test allocates with new.)
namespace {

void* CountedNew(size_t size) {
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  openreg::fuzz::Allocated(malloc_usable_size(p));
  return p;
}

void* CountedAlignedNew(size_t size, std::align_val_t alignment) {
  const size_t align = static_cast<size_t>(alignment);
  void* p = std::aligned_alloc(align, (size + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  openreg::fuzz::Allocated(malloc_usable_size(p));
  return p;
}

void CountedDelete(void* p) {
  if (p == nullptr) return;
  openreg::fuzz::Freed(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(size_t size) { return CountedNew(size); }
void* operator new[](size_t size) { return CountedNew(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  try {
    return CountedNew(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  return operator new(size, std::nothrow);
}
void* operator new(size_t size, std::align_val_t alignment) {
  return CountedAlignedNew(size, alignment);
}
void* operator new[](size_t size, std::align_val_t alignment) {
  return CountedAlignedNew(size, alignment);
}
void operator delete(void* p) noexcept { CountedDelete(p); }
void operator delete[](void* p) noexcept { CountedDelete(p); }
void operator delete(void* p, size_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, size_t) noexcept { CountedDelete(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  CountedDelete(p);
}

namespace openreg::fuzz {
bool AllocationsObservable() { return true; }
}  // namespace openreg::fuzz

#endif  // OPENREG_SANITIZER_ALLOCATOR
