// The caching allocator (torch_backend/block_cache.h) over a fake device:
// splitting, merging, per-stream reuse, cross-stream fencing, empty_cache,
// the OOM retry, the memory fraction, and the recorded history and
// snapshots, with no daemon.
#include "torch_backend/block_cache.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace openreg::torch_backend {
namespace {

using c10::CachingAllocator::StatType;
constexpr size_t kAggregate = static_cast<size_t>(StatType::AGGREGATE);
constexpr size_t kMiB = 1 << 20;

// Fake device memory: addresses from a counter, a capacity, events whose
// completion the test decides. Shared state outlives the cache's copy.
struct FakeDevice {
  size_t capacity = 256 * kMiB;
  size_t used = 0;
  uintptr_t next_address = 0x100000000;
  std::map<void*, size_t> segments;
  int frees = 0;
  EventId next_event = 1;
  std::map<EventId, StreamId> recorded;  // event -> stream
  std::set<StreamId> busy_streams;       // their events are not done yet
  std::string last_error;
  int ignored = 0;
  // Opens by other processes of IPC handles, by block address.
  std::map<const void*, uint64_t> imports;
};

class FakeDeviceMemory : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(FakeDevice* device) : device_(device) {}

  Error Malloc(void** ptr, size_t size) override {
    if (device_->used + size > device_->capacity) {
      device_->last_error = "fake: out of memory";
      return Error::kOutOfMemory;
    }
    *ptr = reinterpret_cast<void*>(device_->next_address);
    device_->next_address += size;
    device_->used += size;
    device_->segments[*ptr] = size;
    return Error::kSuccess;
  }
  Error Free(void* ptr) override {
    auto it = device_->segments.find(ptr);
    if (it == device_->segments.end()) return Error::kInvalidValue;
    device_->used -= it->second;
    device_->segments.erase(it);
    device_->frees += 1;
    return Error::kSuccess;
  }
  Error CreateEvent(EventId* event) override {
    *event = device_->next_event++;
    return Error::kSuccess;
  }
  Error RecordEvent(EventId event, StreamId stream) override {
    device_->recorded[event] = stream;
    return Error::kSuccess;
  }
  Error QueryEvent(EventId event) override {
    return device_->busy_streams.count(device_->recorded[event]) != 0
               ? Error::kNotReady
               : Error::kSuccess;
  }
  Error SynchronizeEvent(EventId event) override {
    device_->busy_streams.erase(device_->recorded[event]);  // waits it out
    return Error::kSuccess;
  }
  Error ImportCount(const void* ptr, size_t size, uint64_t* opens) override {
    *opens = 0;
    for (const auto& [address, count] : device_->imports) {
      const char* begin = static_cast<const char*>(ptr);
      if (address >= begin && address < begin + size) *opens += count;
    }
    return Error::kSuccess;
  }
  Error MemGetInfo(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = device_->capacity - device_->used;
    *total_bytes = device_->capacity;
    return Error::kSuccess;
  }
  std::string LastErrorMessage() override { return device_->last_error; }
  void IgnoreError(Error error, const char*) override {
    if (error != Error::kSuccess) device_->ignored += 1;
  }

 private:
  FakeDevice* device_;
};

class BlockCacheTest : public ::testing::Test {
 protected:
  BlockCacheTest() : cache_(0, std::make_unique<FakeDeviceMemory>(&device_)) {}

  int64_t Current(const c10::CachingAllocator::StatArray& stat) {
    return stat[kAggregate].current;
  }

  FakeDevice device_;
  BlockCache cache_;
};

TEST_F(BlockCacheTest, ASharedBlockIsNotReusedWhileAnotherProcessHasItOpen) {
  void* shared = cache_.Allocate(4096, 0);
  ASSERT_TRUE(cache_.MarkShared(shared));
  device_.imports[shared] = 1;  // a consumer opened its handle
  cache_.Free(shared);
  void* next = cache_.Allocate(4096, 0);
  EXPECT_NE(next, shared);
  EXPECT_EQ(cache_.CollectShared(), 1u);  // still open elsewhere
  device_.imports.erase(shared);          // the consumer closed it
  EXPECT_EQ(cache_.CollectShared(), 0u);
  EXPECT_EQ(cache_.Allocate(4096, 0), shared);
  EXPECT_FALSE(cache_.MarkShared(reinterpret_cast<void*>(0x42)));
}

TEST_F(BlockCacheTest, GrowingTheCacheFirstCollectsClosedSharedBlocks) {
  void* shared = cache_.Allocate(20 * kMiB, 0);  // a segment of its own
  ASSERT_TRUE(cache_.MarkShared(shared));
  cache_.Free(shared);  // nobody opened it: collected at the next need
  const size_t used = device_.used;
  EXPECT_EQ(cache_.Allocate(20 * kMiB, 0), shared);
  EXPECT_EQ(device_.used, used);  // no new segment
}

TEST_F(BlockCacheTest, SmallAllocationsSplitOneSegment) {
  void* a = cache_.Allocate(1000, /*stream=*/0);
  void* b = cache_.Allocate(1000, 0);
  EXPECT_EQ(device_.segments.size(), 1u);  // one 2 MiB small segment
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);  // rounded
  const auto stats = cache_.Stats();
  EXPECT_EQ(Current(stats.reserved_bytes), 2 * static_cast<int64_t>(kMiB));
  EXPECT_EQ(Current(stats.allocated_bytes), 2048);
  EXPECT_EQ(Current(stats.requested_bytes), 2000);
  EXPECT_EQ(stats.num_device_alloc, 1);
}

TEST_F(BlockCacheTest, FreedNeighboursMergeAndTheSpaceIsReused) {
  void* a = cache_.Allocate(4096, 0);
  void* b = cache_.Allocate(4096, 0);
  cache_.Free(a);
  cache_.Free(b);
  // Merged back into one free block: an 8 KiB request fits at a's address.
  EXPECT_EQ(cache_.Allocate(8192, 0), a);
  EXPECT_EQ(device_.segments.size(), 1u);
}

TEST_F(BlockCacheTest, FreedBlockIsReusedOnlyOnItsStream) {
  void* a = cache_.Allocate(4096, /*stream=*/1);
  cache_.Free(a);
  void* other_stream = cache_.Allocate(4096, /*stream=*/2);
  EXPECT_NE(other_stream, a);
  EXPECT_EQ(cache_.Allocate(4096, /*stream=*/1), a);
}

TEST_F(BlockCacheTest, BlockUsedOnAnotherStreamWaitsForThatStream) {
  void* a = cache_.Allocate(4096, /*stream=*/1);
  cache_.RecordStream(a, /*stream=*/2);
  device_.busy_streams.insert(2);
  cache_.Free(a);
  EXPECT_EQ(Current(cache_.Stats().active_bytes), 4096);  // still fenced
  EXPECT_NE(cache_.Allocate(4096, 1), a);                 // not reusable yet
  device_.busy_streams.erase(2);
  EXPECT_EQ(cache_.Allocate(4096, 1), a);  // the event completed
}

// Block records and tree nodes are recycled through splits and merges
// (block_cache.h): a recycled record must carry nothing of its last use.
TEST_F(BlockCacheTest, ABlockSplitOffAgainCarriesNothingOfItsLastUse) {
  void* first = cache_.Allocate(4096, /*stream=*/1);
  void* second = cache_.Allocate(4096, /*stream=*/1);
  cache_.RecordStream(second, /*stream=*/2);
  ASSERT_TRUE(cache_.MarkShared(first));
  cache_.Free(second);  // fenced by stream 2, idle: reusable at once
  EXPECT_EQ(cache_.CollectShared(), 0u);
  cache_.Free(first);  // shared, opened by nobody: merged back at collection
  EXPECT_EQ(cache_.CollectShared(), 0u);
  const uint64_t events_before = device_.next_event;
  for (int round = 0; round < 100; ++round) {
    void* again = cache_.Allocate(4096, /*stream=*/1);
    EXPECT_EQ(again, first) << "round " << round;
    cache_.Free(again);
  }
  // No stream use and no shared mark came back with a recycled record: the
  // frees above recorded no event and left nothing pending.
  EXPECT_EQ(device_.next_event, events_before);
  EXPECT_EQ(cache_.CollectShared(), 0u);
  EXPECT_EQ(Current(cache_.Stats().active_bytes), 0);
  EXPECT_EQ(Current(cache_.Stats().allocated_bytes), 0);
  // The segment is whole again: empty_cache returns it.
  cache_.EmptyCache();
  EXPECT_EQ(device_.used, 0u);
}

TEST_F(BlockCacheTest, EmptyCacheReturnsOnlyWholeFreeSegments) {
  void* kept = cache_.Allocate(4096, 0);
  void* large = cache_.Allocate(30 * kMiB, 0);  // its own segment
  cache_.Free(large);
  EXPECT_EQ(device_.segments.size(), 2u);
  cache_.EmptyCache();
  EXPECT_EQ(device_.segments.size(), 1u);  // the small one is in use
  EXPECT_EQ(device_.frees, 1);
  cache_.Free(kept);
  cache_.EmptyCache();
  EXPECT_TRUE(device_.segments.empty());
  EXPECT_EQ(Current(cache_.Stats().reserved_bytes), 0);
}

TEST_F(BlockCacheTest, OutOfMemoryRetriesAfterReleasingTheCache) {
  device_.capacity = 64 * kMiB;
  void* first = cache_.Allocate(40 * kMiB, 0);
  cache_.Free(first);  // cached, still reserved on the device
  void* second = cache_.Allocate(50 * kMiB, 0);
  EXPECT_NE(second, nullptr);
  const auto stats = cache_.Stats();
  EXPECT_EQ(stats.num_alloc_retries, 1);
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(device_.ignored, 1);  // the first failure was answered
}

TEST_F(BlockCacheTest,
       OutOfMemoryRaisesTorchOutOfMemoryErrorWithTheDevicesWords) {
  device_.capacity = 16 * kMiB;
  try {
    cache_.Allocate(64 * kMiB, 0);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& error) {
    const std::string message = error.what_without_backtrace();
    EXPECT_NE(message.find("fake: out of memory"), std::string::npos);
    EXPECT_NE(message.find("openreg:0"), std::string::npos);
  }
  EXPECT_EQ(cache_.Stats().num_ooms, 1);
  // Nothing leaked: the next allocation that fits works.
  EXPECT_NE(cache_.Allocate(4096, 0), nullptr);
}

TEST_F(BlockCacheTest, MemoryFractionCapsThisProcess) {
  cache_.SetMemoryFraction(0.25, 256 * kMiB);  // 64 MiB
  void* fits = cache_.Allocate(40 * kMiB, 0);
  EXPECT_NE(fits, nullptr);
  EXPECT_THROW(cache_.Allocate(40 * kMiB, 0), c10::OutOfMemoryError);
  EXPECT_THROW(cache_.SetMemoryFraction(1.5, 256 * kMiB), c10::ValueError);
}

TEST_F(BlockCacheTest, AdoptedMemoryIsCountedAndReturnedNotCached) {
  void* adopted = reinterpret_cast<void*>(0x900000000);
  device_.segments[adopted] = 4096;
  device_.used += 4096;
  cache_.Adopt(adopted, 4096);
  EXPECT_EQ(Current(cache_.Stats().allocated_bytes), 4096);
  cache_.Free(adopted);
  EXPECT_EQ(device_.segments.count(adopted), 0u);
  EXPECT_EQ(Current(cache_.Stats().reserved_bytes), 0);
}

TEST_F(BlockCacheTest, PeakAndAccumulatedStatisticsReset) {
  void* a = cache_.Allocate(8192, 0);
  cache_.Free(a);
  auto stats = cache_.Stats();
  EXPECT_EQ(stats.allocated_bytes[kAggregate].peak, 8192);
  cache_.ResetPeakStats();
  cache_.ResetAccumulatedStats();
  stats = cache_.Stats();
  EXPECT_EQ(stats.allocated_bytes[kAggregate].peak, 0);
  EXPECT_EQ(stats.allocated_bytes[kAggregate].allocated, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
}

TEST_F(BlockCacheTest, FreeBlocksSharingASegmentCountAsInactiveSplit) {
  void* a = cache_.Allocate(4096, 0);
  void* b = cache_.Allocate(4096, 0);
  // The segment's free rest is split off already.
  const auto split = [&] { return Current(cache_.Stats().inactive_split); };
  const auto split_bytes = [&] {
    return Current(cache_.Stats().inactive_split_bytes);
  };
  EXPECT_EQ(split(), 1);
  EXPECT_EQ(split_bytes(), static_cast<int64_t>(2 * kMiB - 8192));
  cache_.Free(a);  // a free block between the segment's start and b
  EXPECT_EQ(split(), 2);
  EXPECT_EQ(split_bytes(), static_cast<int64_t>(2 * kMiB - 4096));
  cache_.Free(b);  // everything merges: one whole, releasable segment
  EXPECT_EQ(split(), 0);
  EXPECT_EQ(split_bytes(), 0);
  void* c = cache_.Allocate(100, 0);  // splits the whole segment again
  EXPECT_EQ(split(), 1);
  cache_.Free(c);
  cache_.EmptyCache();
  EXPECT_EQ(split(), 0);
  EXPECT_EQ(cache_.Stats().inactive_split[kAggregate].peak, 2);
}

TEST_F(BlockCacheTest, APrivatePoolsBlocksStayInThePoolUntilItIsReleased) {
  void* pooled = cache_.Allocate(4096, 0, /*pool=*/7);
  void* plain = cache_.Allocate(4096, 0);
  EXPECT_EQ(device_.segments.size(), 2u);  // one segment each
  cache_.Free(pooled);
  EXPECT_NE(cache_.Allocate(4096, 0), pooled);     // not for the default pool
  EXPECT_EQ(cache_.Allocate(4096, 0, 7), pooled);  // reused in the pool
  cache_.Free(pooled);
  cache_.EmptyCache();
  EXPECT_EQ(device_.segments.size(), 2u);  // a live pool keeps its segment
  const CacheSnapshot snapshot = cache_.Snapshot();
  int in_pool = 0;
  for (const SegmentState& segment : snapshot.segments) {
    in_pool += segment.pool == 7;
  }
  EXPECT_EQ(in_pool, 1);
  cache_.ReleasePool(7);
  EXPECT_EQ(device_.segments.size(), 1u);  // only the default pool's
  (void)plain;
}

// A stack stand-in: each gather is a distinct numbered context.
struct FakeContext : c10::GatheredContext {
  explicit FakeContext(int id) : id(id) {}
  int id;
};
int gathered = 0;
std::shared_ptr<c10::GatheredContext> GatherFake() {
  return std::make_shared<FakeContext>(++gathered);
}
int IdOf(const std::shared_ptr<c10::GatheredContext>& context) {
  auto* fake = dynamic_cast<FakeContext*>(context.get());
  return fake == nullptr ? 0 : fake->id;
}

HistorySettings RecordAll(size_t max_entries = 1000) {
  HistorySettings settings;
  settings.gather = &GatherFake;
  settings.frames_on_blocks = true;
  settings.frames_on_alloc = true;
  settings.frames_on_free = true;
  settings.record_trace = true;
  settings.max_entries = max_entries;
  return settings;
}

std::vector<TraceAction> Actions(const CacheSnapshot& snapshot) {
  std::vector<TraceAction> actions;
  for (const TraceEntry& entry : snapshot.trace)
    actions.push_back(entry.action);
  return actions;
}

TEST_F(BlockCacheTest, HistoryIsOffByDefaultAndGathersNothing) {
  gathered = 0;
  cache_.Free(cache_.Allocate(4096, 0));
  EXPECT_TRUE(cache_.Snapshot().trace.empty());
  EXPECT_EQ(gathered, 0);
}

TEST_F(BlockCacheTest, HistoryRecordsTheAllocatorsEventsInOrder) {
  cache_.SetHistory(RecordAll(), /*clear=*/false);
  void* a = cache_.Allocate(1000, 3);
  cache_.Free(a);
  cache_.EmptyCache();
  const CacheSnapshot snapshot = cache_.Snapshot();
  using A = TraceAction;
  EXPECT_EQ(Actions(snapshot),
            (std::vector<A>{A::kSegmentAlloc, A::kAlloc, A::kFreeRequested,
                            A::kFreeCompleted, A::kSegmentFree}));
  const TraceEntry& alloc = snapshot.trace[1];
  EXPECT_EQ(alloc.addr, reinterpret_cast<uintptr_t>(a));
  EXPECT_EQ(alloc.size, 1000u);  // requested, as CUDA's trace has it
  EXPECT_EQ(alloc.stream, 3u);
  EXPECT_EQ(snapshot.trace[0].size, 2 * kMiB);  // the small segment
  // The alloc's stack is also on its free_completed; the free has its own.
  EXPECT_NE(IdOf(alloc.context), 0);
  EXPECT_EQ(IdOf(snapshot.trace[3].context), IdOf(alloc.context));
  EXPECT_NE(IdOf(snapshot.trace[2].context), IdOf(alloc.context));
  EXPECT_LE(snapshot.trace.front().time_us, snapshot.trace.back().time_us);
}

TEST_F(BlockCacheTest, TheRingKeepsTheNewestEntries) {
  cache_.SetHistory(RecordAll(/*max_entries=*/3), /*clear=*/false);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(cache_.Allocate(512, 0));
  const CacheSnapshot snapshot = cache_.Snapshot();
  ASSERT_EQ(snapshot.trace.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(snapshot.trace[i].addr,
              reinterpret_cast<uintptr_t>(blocks[2 + i]));
  }
  // A smaller ring keeps the newest of what it had.
  cache_.SetHistory(RecordAll(/*max_entries=*/2), /*clear=*/false);
  EXPECT_EQ(cache_.Snapshot().trace.front().addr,
            reinterpret_cast<uintptr_t>(blocks[3]));
  cache_.SetHistory(RecordAll(), /*clear=*/true);
  EXPECT_TRUE(cache_.Snapshot().trace.empty());
}

TEST_F(BlockCacheTest, SkippedActionsAreNotRecorded) {
  HistorySettings settings = RecordAll();
  settings.skip_actions = 1u
                          << static_cast<unsigned>(TraceAction::kFreeRequested);
  cache_.SetHistory(settings, /*clear=*/false);
  cache_.Free(cache_.Allocate(512, 0));
  for (const TraceEntry& entry : cache_.Snapshot().trace) {
    EXPECT_NE(entry.action, TraceAction::kFreeRequested);
  }
}

TEST_F(BlockCacheTest, SnapshotShowsEachBlocksStateWithinItsSegment) {
  cache_.SetHistory(RecordAll(), /*clear=*/false);
  void* live = cache_.Allocate(1000, 1);
  void* fenced = cache_.Allocate(2000, 1);
  cache_.RecordStream(fenced, 2);
  device_.busy_streams.insert(2);
  cache_.Free(fenced);
  CacheSnapshot snapshot = cache_.Snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  const SegmentState& segment = snapshot.segments[0];
  EXPECT_EQ(segment.total_size, 2 * kMiB);
  EXPECT_TRUE(segment.small);
  EXPECT_EQ(segment.stream, 1u);
  ASSERT_EQ(segment.blocks.size(), 3u);  // live, fenced, the free rest
  EXPECT_EQ(segment.blocks[0].address, reinterpret_cast<uintptr_t>(live));
  EXPECT_STREQ(segment.blocks[0].state, "active_allocated");
  EXPECT_EQ(segment.blocks[0].requested_size, 1000u);
  EXPECT_NE(IdOf(segment.blocks[0].context), 0);
  EXPECT_STREQ(segment.blocks[1].state, "active_pending_free");
  EXPECT_STREQ(segment.blocks[2].state, "inactive");
  size_t sum = 0;
  for (const BlockState& block : segment.blocks) sum += block.size;
  EXPECT_EQ(sum, segment.total_size);
  // The fence passes: free_completed, and the block is cached again.
  device_.busy_streams.erase(2);
  cache_.EmptyCache();  // polls the fences; `live` keeps the segment
  snapshot = cache_.Snapshot();
  EXPECT_STREQ(snapshot.segments[0].blocks[1].state, "inactive");
  int completed = 0;
  for (const TraceEntry& entry : snapshot.trace) {
    completed += entry.action == TraceAction::kFreeCompleted &&
                 entry.addr == reinterpret_cast<uintptr_t>(fenced);
  }
  EXPECT_EQ(completed, 1);
  cache_.Free(live);
}

TEST_F(BlockCacheTest, AdoptedMemoryIsASegmentOfItsOwnInTheHistory) {
  cache_.SetHistory(RecordAll(), /*clear=*/false);
  void* adopted = reinterpret_cast<void*>(0x5000000);
  cache_.Adopt(adopted, 4096, 7);
  const CacheSnapshot snapshot = cache_.Snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].total_size, 4096u);
  EXPECT_STREQ(snapshot.segments[0].blocks[0].state, "active_allocated");
  using A = TraceAction;
  EXPECT_EQ(Actions(snapshot), (std::vector<A>{A::kSegmentAlloc, A::kAlloc}));
  device_.segments[adopted] = 4096;  // the fake's Free must know it
  device_.used += 4096;
  cache_.Free(adopted);
  EXPECT_EQ(Actions(cache_.Snapshot()),
            (std::vector<A>{A::kSegmentAlloc, A::kAlloc, A::kFreeRequested,
                            A::kFreeCompleted, A::kSegmentFree}));
}

TEST_F(BlockCacheTest, AStoppedHistoryLeavesNoStackOnReusedBlocks) {
  cache_.SetHistory(RecordAll(), /*clear=*/false);
  void* a = cache_.Allocate(512, 0);
  cache_.Free(a);
  cache_.SetHistory(HistorySettings(), /*clear=*/false);
  EXPECT_EQ(cache_.Allocate(512, 0), a);
  EXPECT_EQ(IdOf(cache_.Snapshot().segments[0].blocks[0].context), 0);
}

TEST_F(BlockCacheTest, AnOutOfMemoryErrorIsRecorded) {
  cache_.SetHistory(RecordAll(), /*clear=*/false);
  EXPECT_THROW(cache_.Allocate(1024 * kMiB, 0), c10::OutOfMemoryError);
  const CacheSnapshot snapshot = cache_.Snapshot();
  ASSERT_FALSE(snapshot.trace.empty());
  EXPECT_EQ(snapshot.trace.back().action, TraceAction::kOom);
  EXPECT_EQ(snapshot.trace.back().size, 1024 * kMiB);
  EXPECT_EQ(snapshot.trace.back().device_free, device_.capacity - device_.used);
}

}  // namespace
}  // namespace openreg::torch_backend
