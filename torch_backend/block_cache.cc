#include "torch_backend/block_cache.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <tuple>

#include "absl/strings/str_format.h"

namespace openreg::torch_backend {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;

// Sizes as in PyTorch's CUDA caching allocator.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 << 20;       // small pool: <= 1 MiB
constexpr size_t kSmallBuffer = 2 << 20;     // small segments: 2 MiB
constexpr size_t kMinLargeAlloc = 10 << 20;  // below: 20 MiB segments
constexpr size_t kLargeBuffer = 20 << 20;
constexpr size_t kRoundLarge = 2 << 20;  // large: multiples of 2 MiB

size_t RoundSize(size_t size) {
  return std::max(kMinBlockSize,
                  (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize);
}

size_t SegmentSize(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void Update(Stat& stat, int64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
  if (amount > 0) {
    stat.allocated += amount;
  } else {
    stat.freed -= amount;
  }
}

// Updates the aggregate entry and the pool's entry of a statistic.
void Update(c10::CachingAllocator::StatArray& stats, bool small,
            int64_t amount) {
  Update(stats[static_cast<size_t>(StatType::AGGREGATE)], amount);
  Update(stats[static_cast<size_t>(small ? StatType::SMALL_POOL
                                         : StatType::LARGE_POOL)],
         amount);
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Bytes(size_t bytes) {
  return absl::StrFormat("%.2f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

bool BlockCache::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(a->pool, a->stream, a->size,
                         reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(b->pool, b->stream, b->size,
                         reinterpret_cast<uintptr_t>(b->ptr));
}

void* BlockCache::Allocate(size_t size, StreamId stream, PoolId pool) {
  const std::shared_ptr<c10::GatheredContext> context = MaybeGather(false);
  std::lock_guard<std::mutex> lock(mutex_);
  ProcessPendingFrees(/*wait=*/false);
  const size_t rounded = RoundSize(size);
  const bool small = rounded <= kSmallSize;
  Block* block = FindFreeBlock(rounded, stream, pool, small);
  if (block == nullptr && !shared_freed_.empty()) {
    // Before growing: shared blocks that no other process holds any more.
    const size_t held = shared_freed_.size();
    if (CollectSharedLocked() < held) {
      block = FindFreeBlock(rounded, stream, pool, small);
    }
  }
  if (block == nullptr) {
    block = AllocateSegment(rounded, stream, pool, small, context);
  }
  // Marked first: the split-off remainder must not merge back into it.
  block->allocated = true;
  block = SplitIfWorthIt(block, rounded);
  block->requested = size;
  // Also clears a stack an earlier use of this block left.
  block->context = history_.frames_on_blocks ? context : nullptr;
  active_[block->ptr] = block;
  CountAllocation(block, +1);
  ReportToProfiler(block->ptr, static_cast<int64_t>(block->size));
  Record(TraceAction::kAlloc, block->ptr, size, stream,
         history_.frames_on_alloc ? context : nullptr);
  return block->ptr;
}

BlockCache::Block* BlockCache::FindFreeBlock(size_t size, StreamId stream,
                                             PoolId private_pool, bool small) {
  Pool& pool = PoolFor(small);
  Block probe;
  probe.pool = private_pool;
  probe.stream = stream;
  probe.size = size;
  auto it = pool.lower_bound(&probe);
  if (it == pool.end() || (*it)->stream != stream ||
      (*it)->pool != private_pool) {
    return nullptr;
  }
  Block* block = *it;
  PoolErase(block);
  return block;
}

BlockCache::Block* BlockCache::AllocateSegment(
    size_t rounded, StreamId stream, PoolId pool, bool small,
    const std::shared_ptr<c10::GatheredContext>& context) {
  const std::shared_ptr<c10::GatheredContext> event_context =
      history_.frames_on_alloc ? context : nullptr;
  const size_t segment = SegmentSize(rounded);
  const auto reserved = [&] {
    return static_cast<size_t>(
        stats_.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)]
            .current);
  };
  if (reserved_limit_ != 0 && reserved() + segment > reserved_limit_) {
    ReleaseFreeSegments();
    if (reserved() + segment > reserved_limit_) {
      stats_.num_ooms += 1;
      RecordOutOfMemory(rounded, stream, event_context);
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "openreg: out of memory on device ",
          static_cast<int>(device_), ": tried to allocate ", Bytes(rounded),
          ", which would exceed this process's limit of ",
          Bytes(reserved_limit_), " (set_per_process_memory_fraction); ",
          Bytes(reserved()), " is reserved by this process.");
    }
  }
  void* ptr = nullptr;
  Error error = memory_->Malloc(&ptr, segment);
  if (error == Error::kOutOfMemory) {
    // Cached blocks count against the device: give them back and retry,
    // then wait for blocks still in use on other streams and retry again.
    stats_.num_alloc_retries += 1;
    memory_->IgnoreError(error, "retried after emptying the cache");
    ReleaseFreeSegments();
    error = memory_->Malloc(&ptr, segment);
    if (error == Error::kOutOfMemory && !pending_.empty()) {
      memory_->IgnoreError(error, "retried after pending frees completed");
      ProcessPendingFrees(/*wait=*/true);
      ReleaseFreeSegments();
      error = memory_->Malloc(&ptr, segment);
    }
  }
  if (error != Error::kSuccess) {
    const std::string message = memory_->LastErrorMessage();
    memory_->IgnoreError(error, "raised below with its message");
    if (error == Error::kOutOfMemory) {
      RecordOutOfMemory(rounded, stream, event_context);
      ThrowOutOfMemory(rounded, message);
    }
    TORCH_CHECK(false, message);
  }
  Block* block = NewBlock();
  block->ptr = ptr;
  block->size = segment;
  block->stream = stream;
  block->pool = pool;
  block->small_pool = small;
  Update(stats_.reserved_bytes, small, static_cast<int64_t>(segment));
  Update(stats_.segment, small, 1);
  stats_.num_device_alloc += 1;
  Record(TraceAction::kSegmentAlloc, ptr, segment, stream, event_context);
  return block;
}

BlockCache::Block* BlockCache::SplitIfWorthIt(Block* block, size_t size) {
  const size_t remaining = block->size - size;
  const bool worth_it =
      block->small_pool ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!worth_it) return block;
  Block* rest = NewBlock();
  rest->ptr = static_cast<char*>(block->ptr) + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->pool = block->pool;
  rest->small_pool = block->small_pool;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next != nullptr) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  InsertFree(rest);
  return block;
}

BlockCache::Block* BlockCache::NewBlock() {
  if (spare_blocks_.empty()) return new Block();
  Block* block = spare_blocks_.back().release();
  spare_blocks_.pop_back();
  return block;
}

void BlockCache::DeleteBlock(Block* block) {
  // Enough for the splits a burst of frees merges away; beyond that the
  // records go back to the heap.
  constexpr size_t kMaxSpareBlocks = 256;
  if (spare_blocks_.size() >= kMaxSpareBlocks) {
    delete block;
    return;
  }
  *block = Block();  // as new: a recycled record carries nothing over
  spare_blocks_.emplace_back(block);
}

void BlockCache::InsertFree(Block* block) {
  block->allocated = false;
  block->stream_uses.clear();
  Pool& pool = PoolFor(block->small_pool);
  // Merge with free neighbours of the same segment (blocks waiting for
  // other streams still count as allocated).
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    PoolErase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    DeleteBlock(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    PoolErase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    DeleteBlock(next);
  }
  if (spare_node_.empty()) {
    pool.insert(block);
  } else {
    spare_node_.value() = block;
    pool.insert(std::move(spare_node_));
  }
  if (block->prev != nullptr || block->next != nullptr) {
    CountInactiveSplit(block, +1);
  }
}

void BlockCache::PoolErase(Block* block) {
  Pool::node_type node = PoolFor(block->small_pool).extract(block);
  if (spare_node_.empty()) spare_node_ = std::move(node);
  // A pooled block's neighbours change only through PoolErase and
  // InsertFree, so it is split now exactly when it was at insertion.
  if (block->prev != nullptr || block->next != nullptr) {
    CountInactiveSplit(block, -1);
  }
}

void BlockCache::CountInactiveSplit(const Block* block, int sign) {
  Update(stats_.inactive_split, block->small_pool, sign);
  Update(stats_.inactive_split_bytes, block->small_pool,
         sign * static_cast<int64_t>(block->size));
}

void BlockCache::Free(void* ptr) {
  const std::shared_ptr<c10::GatheredContext> context = MaybeGather(true);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) {
    auto adopted = adopted_.find(ptr);
    if (adopted == adopted_.end()) return;
    const int64_t size = static_cast<int64_t>(adopted->second.size);
    const StreamId stream = adopted->second.stream;
    // The daemon's allocation is its own segment, returned at once.
    Record(TraceAction::kFreeRequested, ptr, size, stream, context);
    Record(TraceAction::kFreeCompleted, ptr, size, stream,
           history_.frames_on_alloc ? adopted->second.context : nullptr);
    Record(TraceAction::kSegmentFree, ptr, size, stream, nullptr);
    adopted_.erase(adopted);
    Update(stats_.allocated_bytes, false, -size);
    Update(stats_.requested_bytes, false, -size);
    Update(stats_.active_bytes, false, -size);
    Update(stats_.reserved_bytes, false, -size);
    Update(stats_.allocation, false, -1);
    Update(stats_.active, false, -1);
    Update(stats_.segment, false, -1);
    stats_.num_device_free += 1;
    ReportToProfiler(ptr, -size);
    memory_->IgnoreError(memory_->Free(ptr),
                         "a lost daemon took the memory with it");
    return;
  }
  Block* block = it->second;
  active_.erase(it);
  CountAllocation(block, -1);
  ReportToProfiler(block->ptr, -static_cast<int64_t>(block->size));
  Record(TraceAction::kFreeRequested, block->ptr, block->requested,
         block->stream, context);
  if (block->shared) {
    shared_freed_.push_back(block);
    return;
  }
  Release(block);
}

bool BlockCache::MarkShared(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return false;
  it->second->shared = true;
  return true;
}

size_t BlockCache::CollectShared() {
  std::lock_guard<std::mutex> lock(mutex_);
  return CollectSharedLocked();
}

size_t BlockCache::CollectSharedLocked() {
  std::vector<Block*> still_open;
  std::vector<Block*> freed;
  freed.swap(shared_freed_);
  for (Block* block : freed) {
    uint64_t opens = 0;
    const Error asked = memory_->ImportCount(block->ptr, block->size, &opens);
    if (asked != Error::kSuccess) {
      // Unknown: keep it out of reuse rather than risk another process's
      // data.
      memory_->IgnoreError(asked, "the block stays out of reuse");
      still_open.push_back(block);
    } else if (opens != 0) {
      still_open.push_back(block);
    } else {
      block->shared = false;
      Release(block);
    }
  }
  shared_freed_ = std::move(still_open);
  return shared_freed_.size();
}

void BlockCache::Release(Block* block) {
  if (block->stream_uses.empty()) {
    RecordFreeCompleted(block);
    InsertFree(block);
    return;
  }
  // Used on other streams too: reusable once each has passed this point.
  PendingFree pending{block, {}};
  for (StreamId stream : block->stream_uses) {
    EventId event = 0;
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    } else if (const Error created = memory_->CreateEvent(&event);
               created != Error::kSuccess) {
      memory_->IgnoreError(created,
                           "a lost daemon runs nothing on the block any more");
      continue;
    }
    if (const Error recorded = memory_->RecordEvent(event, stream);
        recorded != Error::kSuccess) {
      memory_->IgnoreError(recorded,
                           "the stream is gone: nothing of it uses the block");
      spare_events_.push_back(event);
      continue;
    }
    pending.events.push_back(event);
  }
  Update(stats_.active_bytes, block->small_pool,
         static_cast<int64_t>(block->size));
  pending_.push_back(std::move(pending));
}

void BlockCache::ProcessPendingFrees(bool wait) {
  auto done = [&](PendingFree& pending) {
    for (EventId event : pending.events) {
      const Error status =
          wait ? memory_->SynchronizeEvent(event) : memory_->QueryEvent(event);
      if (status == Error::kNotReady) return false;  // an answer, not a failure
      memory_->IgnoreError(status, "a lost device runs nothing on the block");
    }
    return true;
  };
  auto it =
      std::partition(pending_.begin(), pending_.end(),
                     [&](PendingFree& pending) { return !done(pending); });
  for (auto ready = it; ready != pending_.end(); ++ready) {
    spare_events_.insert(spare_events_.end(), ready->events.begin(),
                         ready->events.end());
    Update(stats_.active_bytes, ready->block->small_pool,
           -static_cast<int64_t>(ready->block->size));
    RecordFreeCompleted(ready->block);
    InsertFree(ready->block);
  }
  pending_.erase(it, pending_.end());
}

bool BlockCache::ReleaseFreeSegments() {
  bool released = false;
  for (bool small : {true, false}) {
    Pool& pool = PoolFor(small);
    for (auto it = pool.begin(); it != pool.end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr ||
          (block->pool != 0 && !released_pools_.contains(block->pool))) {
        ++it;
        continue;  // part of a segment still (partly) in use, or kept by
                   // its private pool's owner
      }
      it = pool.erase(it);
      // Stream-ordered in the runtime: queued work on the memory finishes
      // before the daemon reuses it.
      memory_->IgnoreError(memory_->Free(block->ptr),
                           "a lost daemon took the segment with it");
      Update(stats_.reserved_bytes, small, -static_cast<int64_t>(block->size));
      Update(stats_.segment, small, -1);
      stats_.num_device_free += 1;
      Record(TraceAction::kSegmentFree, block->ptr, block->size, block->stream,
             nullptr);
      DeleteBlock(block);
      released = true;
    }
  }
  return released;
}

void BlockCache::ThrowOutOfMemory(size_t size, const std::string& daemon) {
  stats_.num_ooms += 1;
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  TORCH_CHECK_WITH(
      OutOfMemoryError, false,
      daemon.empty() ? "openreg: out of memory" : daemon,
      ". This process holds ", Bytes(stats_.allocated_bytes[aggregate].current),
      " in tensors and ", Bytes(stats_.reserved_bytes[aggregate].current),
      " reserved on openreg:", static_cast<int>(device_), " (tried ",
      Bytes(size), "); other clients of the daemon may hold the rest.");
}

void BlockCache::CountAllocation(Block* block, int sign) {
  const bool small = block->small_pool;
  Update(stats_.allocated_bytes, small,
         sign * static_cast<int64_t>(block->size));
  Update(stats_.requested_bytes, small,
         sign * static_cast<int64_t>(block->requested));
  Update(stats_.active_bytes, small, sign * static_cast<int64_t>(block->size));
  Update(stats_.allocation, small, sign);
  Update(stats_.active, small, sign);
}

void BlockCache::RecordStream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it != active_.end() && it->second->stream != stream) {
    it->second->stream_uses.insert(stream);
  }
}

void BlockCache::ReportToProfiler(void* ptr, int64_t bytes) const {
  // torch.profiler(profile_memory=True): one check of a thread-local while
  // it is off.
  if (!c10::memoryProfilingEnabled()) return;
  c10::reportMemoryUsageToProfiler(
      ptr, bytes, static_cast<size_t>(stats_.allocated_bytes[0].current),
      static_cast<size_t>(stats_.reserved_bytes[0].current),
      c10::Device(c10::DeviceType::PrivateUse1, device_));
}

void BlockCache::Adopt(void* ptr, size_t size, StreamId stream) {
  const std::shared_ptr<c10::GatheredContext> context = MaybeGather(false);
  std::lock_guard<std::mutex> lock(mutex_);
  adopted_[ptr] =
      Adopted{size, stream, history_.frames_on_blocks ? context : nullptr};
  const auto event_context = history_.frames_on_alloc ? context : nullptr;
  Record(TraceAction::kSegmentAlloc, ptr, size, stream, event_context);
  Record(TraceAction::kAlloc, ptr, size, stream, event_context);
  const int64_t bytes = static_cast<int64_t>(size);
  Update(stats_.allocated_bytes, false, bytes);
  Update(stats_.requested_bytes, false, bytes);
  Update(stats_.active_bytes, false, bytes);
  Update(stats_.reserved_bytes, false, bytes);
  Update(stats_.allocation, false, 1);
  Update(stats_.active, false, 1);
  Update(stats_.segment, false, 1);
  ReportToProfiler(ptr, bytes);
}

void BlockCache::ReleasePool(PoolId pool) {
  if (pool == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  released_pools_.insert(pool);
  ProcessPendingFrees(/*wait=*/false);
  ReleaseFreeSegments();
}

void BlockCache::EmptyCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  ProcessPendingFrees(/*wait=*/false);
  ReleaseFreeSegments();
}

void BlockCache::SetMemoryFraction(double fraction, size_t device_total) {
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1,
                    "openreg: memory fraction must be in [0, 1], got ",
                    fraction);
  std::lock_guard<std::mutex> lock(mutex_);
  reserved_limit_ = static_cast<size_t>(fraction * device_total);
}

c10::CachingDeviceAllocator::DeviceStats BlockCache::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockCache::ResetPeakStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* array :
       {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
        &stats_.requested_bytes, &stats_.allocation, &stats_.segment,
        &stats_.active, &stats_.inactive_split, &stats_.inactive_split_bytes}) {
    for (Stat& stat : *array) stat.peak = stat.current;
  }
}

void BlockCache::ResetAccumulatedStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* array :
       {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
        &stats_.requested_bytes, &stats_.allocation, &stats_.segment,
        &stats_.active, &stats_.inactive_split, &stats_.inactive_split_bytes}) {
    for (Stat& stat : *array) stat.allocated = stat.freed = 0;
  }
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

std::shared_ptr<c10::GatheredContext> BlockCache::MaybeGather(bool on_free) {
  const GatherContextFn gather = (on_free ? gather_on_free_ : gather_on_alloc_)
                                     .load(std::memory_order_relaxed);
  return gather == nullptr ? nullptr : gather();
}

void BlockCache::Record(TraceAction action, const void* addr, size_t size,
                        StreamId stream,
                        const std::shared_ptr<c10::GatheredContext>& context) {
  if (!history_.record_trace || history_.max_entries == 0 ||
      (history_.skip_actions >> static_cast<unsigned>(action)) & 1u) {
    return;
  }
  TraceEntry entry;
  entry.action = action;
  entry.addr = reinterpret_cast<uintptr_t>(addr);
  entry.size = size;
  entry.stream = stream;
  entry.time_us = NowMicros();
  entry.context = context;
  if (trace_.size() < history_.max_entries) {
    trace_.push_back(std::move(entry));
    return;
  }
  // Full: the oldest entry makes room, as in CUDA's allocator.
  trace_[trace_next_] = std::move(entry);
  trace_next_ = (trace_next_ + 1) % history_.max_entries;
}

void BlockCache::RecordOutOfMemory(
    size_t size, StreamId stream,
    const std::shared_ptr<c10::GatheredContext>& context) {
  if (!history_.record_trace) return;
  Record(TraceAction::kOom, nullptr, size, stream, context);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (const Error asked = memory_->MemGetInfo(&free_bytes, &total_bytes);
      asked != Error::kSuccess) {
    memory_->IgnoreError(asked, "the oom event says 0 bytes free");
    return;
  }
  // The entry just recorded is the newest one of the ring.
  if (!trace_.empty()) {
    TraceEntry& entry =
        trace_[(trace_next_ + trace_.size() - 1) % trace_.size()];
    if (entry.action == TraceAction::kOom) entry.device_free = free_bytes;
  }
}

void BlockCache::RecordFreeCompleted(Block* block) {
  Record(TraceAction::kFreeCompleted, block->ptr, block->requested,
         block->stream, history_.frames_on_alloc ? block->context : nullptr);
  block->context.reset();  // a cached block has no owner
}

void BlockCache::SetHistory(const HistorySettings& settings, bool clear) {
  std::lock_guard<std::mutex> lock(mutex_);
  history_ = settings;
  gather_on_alloc_.store(settings.frames_on_blocks || settings.frames_on_alloc
                             ? settings.gather
                             : nullptr,
                         std::memory_order_relaxed);
  gather_on_free_.store(settings.frames_on_free ? settings.gather : nullptr,
                        std::memory_order_relaxed);
  // Oldest first again, then only the newest max_entries kept.
  std::rotate(trace_.begin(), trace_.begin() + trace_next_, trace_.end());
  trace_next_ = 0;
  if (clear) trace_.clear();
  if (settings.record_trace && trace_.size() > settings.max_entries) {
    trace_.erase(trace_.begin(), trace_.end() - settings.max_entries);
  }
}

CacheSnapshot BlockCache::Snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheSnapshot snapshot;
  absl::flat_hash_set<const Block*> pending;
  for (const PendingFree& free : pending_) pending.insert(free.block);
  for (const Block* block : shared_freed_) pending.insert(block);
  // Every block belongs to one segment, whose first block has no prev.
  std::vector<Block*> heads;
  absl::flat_hash_set<Block*> seen;
  auto add = [&](Block* block) {
    while (block->prev != nullptr) block = block->prev;
    if (seen.insert(block).second) heads.push_back(block);
  };
  for (const auto& [ptr, block] : active_) add(block);
  for (Block* block : small_blocks_) add(block);
  for (Block* block : large_blocks_) add(block);
  for (const PendingFree& free : pending_) add(free.block);
  for (Block* block : shared_freed_) add(block);
  for (Block* head : heads) {
    SegmentState& segment = snapshot.segments.emplace_back();
    segment.address = reinterpret_cast<uintptr_t>(head->ptr);
    segment.stream = head->stream;
    segment.pool = head->pool;
    segment.small = head->small_pool;
    for (const Block* block = head; block != nullptr; block = block->next) {
      BlockState& state = segment.blocks.emplace_back();
      state.address = reinterpret_cast<uintptr_t>(block->ptr);
      state.size = block->size;
      segment.total_size += block->size;
      if (!block->allocated) continue;  // "inactive", nothing requested
      state.requested_size = block->requested;
      state.state =
          pending.contains(block) ? "active_pending_free" : "active_allocated";
      state.context = block->context;
    }
  }
  for (const auto& [ptr, adopted] : adopted_) {
    SegmentState& segment = snapshot.segments.emplace_back();
    segment.address = reinterpret_cast<uintptr_t>(ptr);
    segment.total_size = adopted.size;
    segment.stream = adopted.stream;
    segment.blocks.push_back(BlockState{segment.address, adopted.size,
                                        adopted.size, "active_allocated",
                                        adopted.context});
  }
  std::sort(snapshot.segments.begin(), snapshot.segments.end(),
            [](const SegmentState& a, const SegmentState& b) {
              return a.address < b.address;
            });
  snapshot.trace.reserve(trace_.size());
  snapshot.trace.insert(snapshot.trace.end(), trace_.begin() + trace_next_,
                        trace_.end());
  snapshot.trace.insert(snapshot.trace.end(), trace_.begin(),
                        trace_.begin() + trace_next_);
  return snapshot;
}

}  // namespace openreg::torch_backend
