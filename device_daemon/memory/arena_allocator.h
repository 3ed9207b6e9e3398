// The memory of one emulated device: a private anonymous mapping owned by
// the daemon, carved up by a best-fit sub-allocator.
//
// Why a real sub-allocator instead of malloc: device memory must have a
// fixed capacity (so out-of-memory behaves like a GPU), addresses must be
// stable offsets that can be encoded as opaque device addresses, and freed
// memory must go back to the OS (MADV_DONTNEED) so that the daemon's RSS
// follows what clients actually hold.
#ifndef OPENREG_DEVICE_DAEMON_MEMORY_ARENA_ALLOCATOR_H_
#define OPENREG_DEVICE_DAEMON_MEMORY_ARENA_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace openreg::daemon {

struct ArenaStats {
  uint64_t capacity = 0;
  uint64_t allocated_bytes = 0;  // sum of (aligned) live block sizes
  uint64_t free_bytes = 0;
  uint64_t largest_free_block = 0;
  uint64_t allocation_count = 0;
};

class ArenaAllocator {
 public:
  // Every block starts on and spans a multiple of this many bytes, enough
  // for any dtype and for vectorized CPU kernels.
  static constexpr uint64_t kAlignment = 512;
  // Freed blocks at least this large give their pages back to the OS.
  static constexpr uint64_t kReleaseThreshold = 64 * 1024;

  // Reserves `capacity` bytes (rounded down to kAlignment) of address space
  // for `device`; pages are only backed once touched.
  static absl::StatusOr<std::unique_ptr<ArenaAllocator>> Create(
      int device, uint64_t capacity);

  ArenaAllocator(const ArenaAllocator&) = delete;
  ArenaAllocator& operator=(const ArenaAllocator&) = delete;
  ~ArenaAllocator();

  // Returns the device address of a new block of at least `size` bytes (a
  // zero-byte request still gets a distinct block). OUT_OF_MEMORY errors
  // name the requested, free and total bytes and the largest free block.
  absl::StatusOr<uint64_t> Allocate(uint64_t size);

  // Returns a block from Allocate. Anything else is an INVALID_VALUE error.
  absl::Status Free(uint64_t address);

  // True when `address` is the start of a live block.
  bool IsAllocated(uint64_t address) const;

  // The daemon-side pointer for [address, address + size) after checking
  // that the range is inside this device's memory. Ownership is checked by
  // the caller (Session).
  absl::StatusOr<char*> HostPointer(uint64_t address, uint64_t size) const;

  ArenaStats Stats() const;
  int device() const { return device_; }
  uint64_t capacity() const { return capacity_; }

  // Bumped by a device reset: blocks allocated in an earlier generation
  // lost their contents (DeviceBuffer::lost()).
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  void AdvanceGeneration() {
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

 private:
  ArenaAllocator(int device, char* base, uint64_t capacity);

  // Adds [offset, offset + size) to the free lists, merging it with free
  // neighbours.
  void InsertFreeBlock(uint64_t offset, uint64_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EraseFreeBlock(std::map<uint64_t, uint64_t>::iterator block)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint64_t LargestFreeBlock() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);

  const int device_;
  char* const base_;
  std::atomic<uint64_t> generation_{0};
  const uint64_t capacity_;

  mutable absl::Mutex mutex_;
  // Free blocks by offset (for coalescing) and by (size, offset) (for best
  // fit); always describe the same set of blocks.
  std::map<uint64_t, uint64_t> free_by_offset_ ABSL_GUARDED_BY(mutex_);
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_ ABSL_GUARDED_BY(mutex_);
  // Live blocks: offset -> aligned size.
  std::map<uint64_t, uint64_t> allocated_ ABSL_GUARDED_BY(mutex_);
  uint64_t allocated_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_MEMORY_ARENA_ALLOCATOR_H_
