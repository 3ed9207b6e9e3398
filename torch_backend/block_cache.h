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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "openreg/runtime.h"
#include "torch_backend/device_memory.h"

namespace openreg::torch_backend {

// torch.openreg.memory._record_memory_history's settings, in the terms of
// torch.cuda's (c10/cuda/CUDACachingAllocator.h): which stacks are kept,
// and the bounded ring of alloc/free events.
using GatherContextFn = std::shared_ptr<c10::GatheredContext> (*)();
enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kOom,
};
struct HistorySettings {
  // Captures the caller's stack (null: no frames). Called outside the
  // cache's lock: gathering Python frames takes the GIL.
  GatherContextFn gather = nullptr;
  bool frames_on_blocks = false;  // who allocated each live block
  bool frames_on_alloc = false;   // on alloc / segment_alloc events
  bool frames_on_free = false;    // on free_requested events
  bool record_trace = false;      // keep the event ring
  size_t max_entries = 0;
  uint32_t skip_actions = 0;  // bit (1 << TraceAction) set: not recorded
};
struct TraceEntry {
  TraceAction action = TraceAction::kAlloc;
  uintptr_t addr = 0;
  size_t size = 0;
  StreamId stream = 0;
  int64_t time_us = 0;     // since the Unix epoch
  size_t device_free = 0;  // "oom" only: what the device had free
  std::shared_ptr<c10::GatheredContext> context;
};
// The cache's state for torch.cuda.memory._snapshot's "segments".
struct BlockState {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;
  // "active_allocated", "active_pending_free" (freed, waiting for other
  // streams or IPC importers) or "inactive" (cached).
  const char* state = "inactive";
  std::shared_ptr<c10::GatheredContext> context;
};
// A private memory pool (torch.openreg.MemPool); 0 is the default pool.
using PoolId = uint64_t;

struct SegmentState {
  uintptr_t address = 0;
  size_t total_size = 0;
  StreamId stream = 0;
  PoolId pool = 0;
  bool small = false;
  std::vector<BlockState> blocks;
};
struct CacheSnapshot {
  std::vector<SegmentState> segments;
  std::vector<TraceEntry> trace;  // oldest first
};

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
  // A block of private pool `pool` comes from, and returns to, segments
  // of that pool only.
  void* Allocate(size_t size, StreamId stream, PoolId pool = 0);
  // A pool's owner is gone: its free segments are returned to the daemon
  // now, and the others once their blocks are freed and the cache emptied.
  void ReleasePool(PoolId pool);
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
  void Adopt(void* ptr, size_t size, StreamId stream = 0);
  // Returns every fully free segment to the daemon.
  void EmptyCache();
  // Caps this process's reserved memory at fraction * device capacity.
  void SetMemoryFraction(double fraction, size_t device_total);

  c10::CachingDeviceAllocator::DeviceStats Stats();
  void ResetPeakStats();
  void ResetAccumulatedStats();

  // Starts, changes or stops recording (settings.gather null and
  // record_trace false stop it); `clear` empties the event ring.
  void SetHistory(const HistorySettings& settings, bool clear);
  // Segments with their blocks, and the recorded events.
  CacheSnapshot Snapshot();

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    StreamId stream = 0;
    PoolId pool = 0;
    bool allocated = false;
    bool small_pool = false;
    bool shared = false;    // exported through an IPC handle
    Block* prev = nullptr;  // neighbours within one segment
    Block* next = nullptr;
    absl::flat_hash_set<StreamId> stream_uses;
    // Who allocated it, while history is recorded with frames.
    std::shared_ptr<c10::GatheredContext> context;
  };
  struct Adopted {
    size_t size = 0;
    StreamId stream = 0;
    std::shared_ptr<c10::GatheredContext> context;
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
  // Block records are reused (a split and a merge per op would otherwise
  // allocate and free one each time).
  Block* NewBlock();
  void DeleteBlock(Block* block);
  Block* FindFreeBlock(size_t size, StreamId stream, PoolId pool, bool small);
  Block* AllocateSegment(size_t size, StreamId stream, PoolId pool, bool small,
                         const std::shared_ptr<c10::GatheredContext>& context);
  Block* SplitIfWorthIt(Block* block, size_t size);
  // Tells torch.profiler (profile_memory=True) about an allocation (bytes
  // > 0) or a free (bytes < 0), with the totals after it.
  void ReportToProfiler(void* ptr, int64_t bytes) const;
  void InsertFree(Block* block);
  // Takes a free block out of its pool. Free blocks that share their
  // segment with others are counted as inactive_split (memory_summary's
  // "Non-releasable": empty_cache cannot return them).
  void PoolErase(Block* block);
  void CountInactiveSplit(const Block* block, int sign);
  void ProcessPendingFrees(bool wait);
  // Free's path for a block no other process holds.
  void Release(Block* block);
  size_t CollectSharedLocked();
  bool ReleaseFreeSegments();
  [[noreturn]] void ThrowOutOfMemory(size_t size, const std::string& daemon);
  void CountAllocation(Block* block, int sign);
  // The stack for an event, when the settings ask for one (outside the
  // lock); one relaxed load when history is off.
  std::shared_ptr<c10::GatheredContext> MaybeGather(bool on_free);
  void Record(TraceAction action, const void* addr, size_t size,
              StreamId stream,
              const std::shared_ptr<c10::GatheredContext>& context);
  // free_completed for a block about to become reusable.
  void RecordFreeCompleted(Block* block);
  // An "oom" event with what the daemon has free (asked only while the
  // history is recorded).
  void RecordOutOfMemory(size_t size, StreamId stream,
                         const std::shared_ptr<c10::GatheredContext>& context);

  const c10::DeviceIndex device_;
  const std::unique_ptr<DeviceMemory> memory_;
  std::mutex mutex_;
  Pool small_blocks_;
  Pool large_blocks_;
  absl::flat_hash_map<void*, Block*> active_;
  absl::flat_hash_map<void*, Adopted> adopted_;
  std::vector<PendingFree> pending_;
  // Freed blocks that another process may still have open (IPC).
  std::vector<Block*> shared_freed_;
  std::vector<EventId> spare_events_;
  std::vector<std::unique_ptr<Block>> spare_blocks_;
  // A pool's tree node kept from the last erase for the next insert (both
  // pools are one type): a block split off and merged back per op costs no
  // node allocation.
  Pool::node_type spare_node_;
  size_t reserved_limit_ = 0;  // 0 = no limit
  // Private pools whose owner is gone: their free segments are released.
  absl::flat_hash_set<PoolId> released_pools_;
  c10::CachingDeviceAllocator::DeviceStats stats_;
  // History (SetHistory): the gather functions are read without the lock.
  std::atomic<GatherContextFn> gather_on_alloc_{nullptr};
  std::atomic<GatherContextFn> gather_on_free_{nullptr};
  HistorySettings history_;
  std::vector<TraceEntry> trace_;  // a ring of history_.max_entries
  size_t trace_next_ = 0;          // where the next entry goes once full
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_BLOCK_CACHE_H_
