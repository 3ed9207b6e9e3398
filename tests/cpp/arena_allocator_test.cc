#include "device_daemon/memory/arena_allocator.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t kAlign = ArenaAllocator::kAlignment;

std::unique_ptr<ArenaAllocator> MakeArena(uint64_t capacity, int device = 0) {
  absl::StatusOr<std::unique_ptr<ArenaAllocator>> arena =
      ArenaAllocator::Create(device, capacity);
  EXPECT_TRUE(arena.ok()) << arena.status();
  return *std::move(arena);
}

uint64_t Offset(uint64_t address) { return OffsetOfAddress(address); }

TEST(ArenaAllocatorTest, AddressesAreTaggedAlignedAndNonNull) {
  auto arena = MakeArena(1 << 20, /*device=*/3);
  absl::StatusOr<uint64_t> first = arena->Allocate(1);
  ASSERT_TRUE(first.ok());
  EXPECT_NE(*first, 0u);  // offset 0 still yields a non-null address
  EXPECT_TRUE(IsDeviceAddress(*first));
  EXPECT_EQ(DeviceOfAddress(*first), 3);
  EXPECT_EQ(Offset(*first), 0u);
  for (uint64_t size : {1, 100, 511, 512, 513, 4097}) {
    absl::StatusOr<uint64_t> address = arena->Allocate(size);
    ASSERT_TRUE(address.ok());
    EXPECT_EQ(Offset(*address) % kAlign, 0u) << size;
  }
}

TEST(ArenaAllocatorTest, ZeroByteAllocationsAreDistinct) {
  auto arena = MakeArena(1 << 20);
  uint64_t a = *arena->Allocate(0);
  uint64_t b = *arena->Allocate(0);
  EXPECT_NE(a, b);
  EXPECT_EQ(arena->Stats().allocated_bytes, 2 * kAlign);
  EXPECT_TRUE(arena->Free(a).ok());
  EXPECT_TRUE(arena->Free(b).ok());
}

TEST(ArenaAllocatorTest, BestFitPicksTheSmallestHoleThatFits) {
  auto arena = MakeArena(64 * kAlign);
  // Layout: [A:4][s1][B:2][s2][C:8][s3][rest]; freeing A, B, C leaves holes
  // of 4, 2 and 8 blocks separated by live separators.
  uint64_t a = *arena->Allocate(4 * kAlign);
  uint64_t s1 = *arena->Allocate(kAlign);
  uint64_t b = *arena->Allocate(2 * kAlign);
  uint64_t s2 = *arena->Allocate(kAlign);
  uint64_t c = *arena->Allocate(8 * kAlign);
  uint64_t s3 = *arena->Allocate(kAlign);
  ASSERT_TRUE(arena->Free(a).ok());
  ASSERT_TRUE(arena->Free(b).ok());
  ASSERT_TRUE(arena->Free(c).ok());

  EXPECT_EQ(*arena->Allocate(2 * kAlign), b);    // exact fit
  EXPECT_EQ(*arena->Allocate(3 * kAlign), a);    // 4-block hole, not 8
  uint64_t in_c = *arena->Allocate(5 * kAlign);  // only C is big enough
  EXPECT_EQ(in_c, c);
  // C's remainder (3 blocks) is now the best fit for 3 blocks.
  EXPECT_EQ(*arena->Allocate(3 * kAlign), c + 5 * kAlign);
  (void)s1;
  (void)s2;
  (void)s3;
}

TEST(ArenaAllocatorTest, FreeCoalescesWithBothNeighbours) {
  auto arena = MakeArena(16 * kAlign);
  uint64_t a = *arena->Allocate(kAlign);
  uint64_t b = *arena->Allocate(kAlign);
  uint64_t c = *arena->Allocate(kAlign);
  uint64_t rest = *arena->Allocate(13 * kAlign);
  EXPECT_EQ(arena->Stats().free_bytes, 0u);
  ASSERT_TRUE(arena->Free(a).ok());
  ASSERT_TRUE(arena->Free(c).ok());
  EXPECT_EQ(arena->Stats().largest_free_block, kAlign);
  ASSERT_TRUE(arena->Free(b).ok());  // joins a and c
  EXPECT_EQ(arena->Stats().largest_free_block, 3 * kAlign);
  EXPECT_EQ(*arena->Allocate(3 * kAlign), a);
  ASSERT_TRUE(arena->Free(a).ok());
  ASSERT_TRUE(arena->Free(rest).ok());
  EXPECT_EQ(arena->Stats().largest_free_block, 16 * kAlign);
}

TEST(ArenaAllocatorTest, OutOfMemoryNamesRequestedFreeTotalAndLargestBlock) {
  auto arena = MakeArena(1 << 20);
  uint64_t a = *arena->Allocate(256 * 1024);
  *arena->Allocate(256 * 1024);
  uint64_t c = *arena->Allocate(256 * 1024);
  *arena->Allocate(256 * 1024);
  ASSERT_TRUE(arena->Free(a).ok());
  ASSERT_TRUE(arena->Free(c).ok());  // 512 KiB free, largest block 256 KiB
  absl::StatusOr<uint64_t> failed = arena->Allocate(300 * 1024);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(ErrorCodeOf(failed.status()), proto::OUT_OF_MEMORY);
  const std::string message(failed.status().message());
  EXPECT_NE(message.find("device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("307200 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("524288 bytes) free"), std::string::npos) << message;
  EXPECT_NE(message.find("1048576 bytes) total"), std::string::npos) << message;
  EXPECT_NE(message.find("largest free block 256.00 KiB"), std::string::npos)
      << message;
}

TEST(ArenaAllocatorTest, CapacityIsEnforced) {
  auto arena = MakeArena(8 * kAlign);
  EXPECT_FALSE(arena->Allocate(8 * kAlign + 1).ok());
  EXPECT_FALSE(arena->Allocate(UINT64_MAX).ok());
  uint64_t all = *arena->Allocate(8 * kAlign);
  EXPECT_FALSE(arena->Allocate(1).ok());
  ASSERT_TRUE(arena->Free(all).ok());
  EXPECT_TRUE(arena->Allocate(1).ok());
}

TEST(ArenaAllocatorTest, FragmentationThenFullCoalesce) {
  constexpr int kBlocks = 256;
  auto arena = MakeArena(kBlocks * kAlign);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.push_back(*arena->Allocate(kAlign));
  EXPECT_FALSE(arena->Allocate(1).ok());
  // Free every other block: half the memory is free but no hole is bigger
  // than one block.
  for (int i = 0; i < kBlocks; i += 2) ASSERT_TRUE(arena->Free(blocks[i]).ok());
  ArenaStats stats = arena->Stats();
  EXPECT_EQ(stats.free_bytes, kBlocks / 2 * kAlign);
  EXPECT_EQ(stats.largest_free_block, kAlign);
  EXPECT_FALSE(arena->Allocate(2 * kAlign).ok());
  // Free the rest in a shuffled order; everything must merge back.
  std::vector<uint64_t> odd;
  for (int i = 1; i < kBlocks; i += 2) odd.push_back(blocks[i]);
  std::shuffle(odd.begin(), odd.end(), std::mt19937(42));
  for (uint64_t address : odd) ASSERT_TRUE(arena->Free(address).ok());
  stats = arena->Stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.allocation_count, 0u);
  EXPECT_EQ(stats.largest_free_block, kBlocks * kAlign);
  EXPECT_EQ(*arena->Allocate(kBlocks * kAlign), blocks[0]);
}

TEST(ArenaAllocatorTest, StatsTrackAllocations) {
  auto arena = MakeArena(1 << 20);
  ArenaStats stats = arena->Stats();
  EXPECT_EQ(stats.capacity, 1u << 20);
  EXPECT_EQ(stats.free_bytes, 1u << 20);
  EXPECT_EQ(stats.largest_free_block, 1u << 20);
  uint64_t a = *arena->Allocate(1000);  // rounds to 1024
  *arena->Allocate(512);
  stats = arena->Stats();
  EXPECT_EQ(stats.allocated_bytes, 1536u);
  EXPECT_EQ(stats.free_bytes, (1u << 20) - 1536);
  EXPECT_EQ(stats.allocation_count, 2u);
  EXPECT_EQ(stats.largest_free_block, (1u << 20) - 1536);
  ASSERT_TRUE(arena->Free(a).ok());
  stats = arena->Stats();
  EXPECT_EQ(stats.allocated_bytes, 512u);
  EXPECT_EQ(stats.allocation_count, 1u);
}

TEST(ArenaAllocatorTest, BadFreesAreRejected) {
  auto arena = MakeArena(1 << 20, /*device=*/1);
  uint64_t a = *arena->Allocate(4096);
  absl::Status interior = arena->Free(a + 512);
  EXPECT_EQ(ErrorCodeOf(interior), proto::INVALID_VALUE);
  EXPECT_EQ(ErrorCodeOf(arena->Free(MakeDeviceAddress(0, 0))),
            proto::INVALID_VALUE);  // other device
  EXPECT_EQ(ErrorCodeOf(arena->Free(0x1234)), proto::INVALID_VALUE);
  ASSERT_TRUE(arena->Free(a).ok());
  absl::Status twice = arena->Free(a);
  EXPECT_EQ(ErrorCodeOf(twice), proto::INVALID_VALUE);
  EXPECT_NE(twice.message().find("not the start of a live allocation"),
            absl::string_view::npos)
      << twice;
  EXPECT_EQ(arena->Stats().allocated_bytes, 0u);
}

TEST(ArenaAllocatorTest, HostPointerChecksBounds) {
  auto arena = MakeArena(1 << 20, /*device=*/2);
  uint64_t a = *arena->Allocate(4096);
  absl::StatusOr<char*> pointer = arena->HostPointer(a, 4096);
  ASSERT_TRUE(pointer.ok());
  std::memset(*pointer, 0xab, 4096);  // the memory is really there
  EXPECT_TRUE(arena->HostPointer(MakeDeviceAddress(2, (1 << 20) - 1), 1).ok());
  EXPECT_FALSE(arena->HostPointer(MakeDeviceAddress(2, (1 << 20) - 1), 2).ok());
  EXPECT_FALSE(arena->HostPointer(MakeDeviceAddress(2, 0), UINT64_MAX).ok());
  EXPECT_FALSE(arena->HostPointer(MakeDeviceAddress(1, 0), 1).ok());
  EXPECT_FALSE(arena->HostPointer(0x1000, 1).ok());
}

TEST(ArenaAllocatorTest, RejectsBadConfiguration) {
  EXPECT_FALSE(ArenaAllocator::Create(0, 100).ok());  // below one block
  EXPECT_FALSE(ArenaAllocator::Create(-1, 1 << 20).ok());
  EXPECT_FALSE(ArenaAllocator::Create(kMaxDevices, 1 << 20).ok());
  EXPECT_FALSE(ArenaAllocator::Create(0, kDeviceOffsetMask + kAlign).ok());
}

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * getpagesize();
}

TEST(ArenaAllocatorTest, FreeingLargeBlocksReturnsPagesToTheOs) {
  constexpr uint64_t kBig = 64ull << 20;
  auto arena = MakeArena(2 * kBig);
  uint64_t a = *arena->Allocate(kBig);
  char* data = *arena->HostPointer(a, kBig);
  const uint64_t before = ResidentBytes();
  std::memset(data, 1, kBig);
  const uint64_t touched = ResidentBytes();
  EXPECT_GE(touched, before + kBig / 2);
  ASSERT_TRUE(arena->Free(a).ok());
  const uint64_t released = ResidentBytes();
  EXPECT_LE(released, touched - kBig / 2)
      << "before " << before << " touched " << touched << " after free "
      << released;
  // Reused memory reads as zero again (MADV_DONTNEED on private memory).
  uint64_t again = *arena->Allocate(kBig);
  EXPECT_EQ((*arena->HostPointer(again, 1))[0], 0);
}

TEST(ArenaAllocatorTest, ConcurrentAllocateAndFreeKeepStatsConsistent) {
  auto arena = MakeArena(64ull << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      std::mt19937 random(t);
      std::vector<uint64_t> live;
      for (int i = 0; i < 2000; ++i) {
        if (live.empty() || random() % 3 != 0) {
          absl::StatusOr<uint64_t> address =
              arena->Allocate(1 + random() % 20000);
          if (address.ok()) live.push_back(*address);
        } else {
          const size_t index = random() % live.size();
          EXPECT_TRUE(arena->Free(live[index]).ok());
          live.erase(live.begin() + index);
        }
      }
      for (uint64_t address : live) EXPECT_TRUE(arena->Free(address).ok());
    });
  }
  for (auto& thread : threads) thread.join();
  const ArenaStats stats = arena->Stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  EXPECT_EQ(stats.allocation_count, 0u);
  EXPECT_EQ(stats.largest_free_block, 64ull << 20);
}

}  // namespace
}  // namespace openreg::daemon
