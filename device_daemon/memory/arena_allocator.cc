#include "device_daemon/memory/arena_allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data_plane/device_address.h"
#include "device_daemon/base/byte_size.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

constexpr uint64_t AlignDown(uint64_t value, uint64_t alignment) {
  return value / alignment * alignment;
}

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

std::string Bytes(uint64_t bytes) {
  return absl::StrCat(FormatByteSize(bytes), " (", bytes, " bytes)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArenaAllocator>> ArenaAllocator::Create(
    int device, uint64_t capacity) {
  if (device < 0 || device >= kMaxDevices) {
    return InvalidDeviceError(absl::StrCat(
        "device index ", device, " is outside [0, ", kMaxDevices, ")"));
  }
  capacity = AlignDown(capacity, kAlignment);
  if (capacity == 0 || capacity > kDeviceOffsetMask) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device memory must be between ", kAlignment, " bytes and ",
        FormatByteSize(kDeviceOffsetMask), ", got ", capacity, " bytes"));
  }
  void* base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", Bytes(capacity), " for device ", device,
                     ": ", std::strerror(errno)));
  }
  return std::unique_ptr<ArenaAllocator>(
      new ArenaAllocator(device, static_cast<char*>(base), capacity));
}

ArenaAllocator::ArenaAllocator(int device, char* base, uint64_t capacity)
    : device_(device), base_(base), capacity_(capacity) {
  absl::MutexLock lock(&mutex_);
  InsertFreeBlock(0, capacity_);
}

ArenaAllocator::~ArenaAllocator() { munmap(base_, capacity_); }

absl::StatusOr<uint64_t> ArenaAllocator::Allocate(uint64_t size) {
  // A zero-byte request still gets its own block: its address must be
  // unique and freeable, as with cudaMalloc of small sizes.
  const uint64_t aligned =
      size > capacity_ ? 0 : AlignUp(size == 0 ? 1 : size, kAlignment);
  absl::MutexLock lock(&mutex_);
  auto best = aligned == 0 ? free_by_size_.end()
                           : free_by_size_.lower_bound({aligned, 0});
  if (best == free_by_size_.end()) {
    return OutOfMemoryError(absl::StrCat(
        "out of memory on device ", device_, ": requested ", Bytes(size), ", ",
        Bytes(capacity_ - allocated_bytes_), " free of ", Bytes(capacity_),
        " total, largest free block ", Bytes(LargestFreeBlock())));
  }
  const auto [block_size, offset] = *best;
  EraseFreeBlock(free_by_offset_.find(offset));
  if (block_size > aligned) {
    // The remainder cannot have a free neighbour: the block was maximal.
    free_by_offset_.emplace(offset + aligned, block_size - aligned);
    free_by_size_.emplace(block_size - aligned, offset + aligned);
  }
  allocated_.emplace(offset, aligned);
  allocated_bytes_ += aligned;
  return MakeDeviceAddress(device_, offset);
}

absl::Status ArenaAllocator::Free(uint64_t address) {
  if (!IsDeviceAddress(address) || DeviceOfAddress(address) != device_) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " is not an address on device ", device_));
  }
  const uint64_t offset = OffsetOfAddress(address);
  uint64_t size = 0;
  {
    absl::MutexLock lock(&mutex_);
    auto block = allocated_.find(offset);
    if (block == allocated_.end()) {
      return InvalidValueError(absl::StrCat(
          Hex(address), " is not the start of a live allocation on device ",
          device_));
    }
    size = block->second;
    allocated_.erase(block);
  }
  // The block is now in neither list, so no other thread can hand it out
  // while its pages are dropped; the mutex is not held for the syscall.
  // Pages it shares with neighbouring blocks are kept.
  if (size >= kReleaseThreshold) {
    const uint64_t first_page = AlignUp(offset, getpagesize());
    const uint64_t end_page = AlignDown(offset + size, getpagesize());
    if (end_page > first_page) {
      madvise(base_ + first_page, end_page - first_page, MADV_DONTNEED);
    }
  }
  absl::MutexLock lock(&mutex_);
  allocated_bytes_ -= size;
  InsertFreeBlock(offset, size);
  return absl::OkStatus();
}

bool ArenaAllocator::IsAllocated(uint64_t address) const {
  if (!IsDeviceAddress(address) || DeviceOfAddress(address) != device_) {
    return false;
  }
  absl::MutexLock lock(&mutex_);
  return allocated_.count(OffsetOfAddress(address)) != 0;
}

absl::StatusOr<char*> ArenaAllocator::HostPointer(uint64_t address,
                                                  uint64_t size) const {
  if (!IsDeviceAddress(address) || DeviceOfAddress(address) != device_) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " is not an address on device ", device_));
  }
  const uint64_t offset = OffsetOfAddress(address);
  if (offset > capacity_ || size > capacity_ - offset) {
    return InvalidValueError(absl::StrCat("range ", Hex(address), " + ", size,
                                          " bytes runs past the end of device ",
                                          device_, "'s ", Bytes(capacity_)));
  }
  return base_ + offset;
}

ArenaStats ArenaAllocator::Stats() const {
  absl::MutexLock lock(&mutex_);
  ArenaStats stats;
  stats.capacity = capacity_;
  stats.allocated_bytes = allocated_bytes_;
  stats.free_bytes = capacity_ - allocated_bytes_;
  stats.largest_free_block = LargestFreeBlock();
  stats.allocation_count = allocated_.size();
  return stats;
}

void ArenaAllocator::InsertFreeBlock(uint64_t offset, uint64_t size) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && offset + size == next->first) {
    size += next->second;
    auto merged = next++;
    EraseFreeBlock(merged);
  }
  if (next != free_by_offset_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      offset = previous->first;
      size += previous->second;
      EraseFreeBlock(previous);
    }
  }
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void ArenaAllocator::EraseFreeBlock(
    std::map<uint64_t, uint64_t>::iterator block) {
  free_by_size_.erase({block->second, block->first});
  free_by_offset_.erase(block);
}

uint64_t ArenaAllocator::LargestFreeBlock() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace openreg::daemon
