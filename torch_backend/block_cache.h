// A per-device cache of daemon memory, shaped like PyTorch's CUDA caching
// allocator: segments obtained from the daemon are split into blocks,
// freed blocks are kept for reuse on the stream that used them, neighbours
// are merged, and empty_cache() returns whole free segments to the daemon.
//
// Written here because torch 2.13 ships only the statistics types and the
// DeviceAllocator interface for devices (c10/core/CachingDeviceAllocator.h),
// not a device-generic caching allocator.
#ifndef OPENREG_TORCH_BACKEND_BLOCK_CACHE_H_
#define OPENREG_TORCH_BACKEND_BLOCK_CACHE_H_

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "openreg/runtime.h"
#include "torch_backend/device_memory.h"

namespace openreg::torch_backend {

class BlockCache {
 public:
  // Segments and events come from `memory` (RuntimeDeviceMemory in the
  // backend, a fake in tests).
  BlockCache(c10::DeviceIndex device, std::unique_ptr<DeviceMemory> memory)
      : device_(device), memory_(std::move(memory)) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least `size` bytes for use on `stream`; throws
  // torch.OutOfMemoryError when even an emptied cache cannot serve it.
  void* Allocate(size_t size, StreamId stream);
  // Returns a block to the cache (after the streams recorded for it have
  // passed their uses). Unknown pointers are ignored.
  void Free(void* ptr);
  // Marks a block as used on another stream (Tensor.record_stream).
  void RecordStream(void* ptr, StreamId stream);
  // Marks a block as shared through an IPC handle: once freed, it is kept
  // out of reuse until no other process has it open (CollectShared).
  // False for a pointer that is not an allocated block.
  bool MarkShared(void* ptr);
  // Returns freed shared blocks that no process has open any more to the
  // cache; returns how many freed blocks are still held open elsewhere.
  // Done by torch.openreg.ipc_collect() and before growing the cache.
  size_t CollectShared();
  // Accounts memory the daemon allocated for this session (a synchronous
  // op's output); it is returned to the daemon, not cached, when freed.
  void Adopt(void* ptr, size_t size);
  // Returns every fully free segment to the daemon.
  void EmptyCache();
  // Caps this process's reserved memory at fraction * device capacity.
  void SetMemoryFraction(double fraction, size_t device_total);

  c10::CachingDeviceAllocator::DeviceStats Stats();
  void ResetPeakStats();
  void ResetAccumulatedStats();

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    StreamId stream = 0;
    bool allocated = false;
    bool small_pool = false;
    bool shared = false;    // exported through an IPC handle
    Block* prev = nullptr;  // neighbours within one segment
    Block* next = nullptr;
    absl::flat_hash_set<StreamId> stream_uses;
  };
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct PendingFree {
    Block* block;
    std::vector<EventId> events;  // one per stream the block was used on
  };

  Pool& PoolFor(bool small) { return small ? small_blocks_ : large_blocks_; }
  Block* FindFreeBlock(size_t size, StreamId stream, bool small);
  Block* AllocateSegment(size_t size, StreamId stream, bool small);
  Block* SplitIfWorthIt(Block* block, size_t size);
  void InsertFree(Block* block);
  void ProcessPendingFrees(bool wait);
  // Free's path for a block no other process holds.
  void Release(Block* block);
  size_t CollectSharedLocked();
  bool ReleaseFreeSegments();
  [[noreturn]] void ThrowOutOfMemory(size_t size, const std::string& daemon);
  void CountAllocation(Block* block, int sign);

  const c10::DeviceIndex device_;
  const std::unique_ptr<DeviceMemory> memory_;
  std::mutex mutex_;
  Pool small_blocks_;
  Pool large_blocks_;
  absl::flat_hash_map<void*, Block*> active_;
  absl::flat_hash_map<void*, size_t> adopted_;
  std::vector<PendingFree> pending_;
  // Freed blocks that another process may still have open (IPC).
  std::vector<Block*> shared_freed_;
  std::vector<EventId> spare_events_;
  size_t reserved_limit_ = 0;  // 0 = no limit
  c10::CachingDeviceAllocator::DeviceStats stats_;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_BLOCK_CACHE_H_
