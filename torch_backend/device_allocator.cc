#include "torch_backend/device_allocator.h"

#include <c10/util/flat_hash_map.h>

#include <array>
#include <mutex>

#include "data_plane/device_address.h"
#include "openreg/runtime.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kAggregate = static_cast<size_t>(StatType::AGGREGATE);

void Increase(Stat& stat, int64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
  stat.allocated += amount;
}

void Decrease(Stat& stat, int64_t amount) {
  stat.current -= amount;
  stat.freed += amount;
}

// The aggregate byte and count statistics this allocator maintains. Without
// a caching layer, reserved = active = allocated memory.
template <typename Fn>
void ForEachByteStat(DeviceStats& stats, Fn&& fn) {
  for (auto* array : {&stats.allocated_bytes, &stats.reserved_bytes,
                      &stats.active_bytes, &stats.requested_bytes}) {
    fn((*array)[kAggregate]);
  }
}

template <typename Fn>
void ForEachCountStat(DeviceStats& stats, Fn&& fn) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active}) {
    fn((*array)[kAggregate]);
  }
}

// Sizes of live allocations and per-device statistics. Without a caching
// layer, reserved memory equals allocated memory.
class AllocationTable {
 public:
  void Add(void* ptr, size_t nbytes, c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[ptr] = nbytes;
    DeviceStats& stats = stats_[device];
    ForEachByteStat(stats, [&](Stat& stat) { Increase(stat, nbytes); });
    ForEachCountStat(stats, [](Stat& stat) { Increase(stat, 1); });
    stats.num_device_alloc += 1;
  }

  void Remove(void* ptr, c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    const int64_t nbytes = static_cast<int64_t>(it->second);
    live_.erase(it);
    DeviceStats& stats = stats_[device];
    ForEachByteStat(stats, [&](Stat& stat) { Decrease(stat, nbytes); });
    ForEachCountStat(stats, [](Stat& stat) { Decrease(stat, 1); });
    stats.num_device_free += 1;
  }

  DeviceStats Get(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[device];
  }

  void ResetPeak(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& stats = stats_[device];
    auto reset = [](Stat& stat) { stat.peak = stat.current; };
    ForEachByteStat(stats, reset);
    ForEachCountStat(stats, reset);
  }

  void ResetAccumulated(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& stats = stats_[device];
    auto reset = [](Stat& stat) { stat.allocated = stat.freed = 0; };
    ForEachByteStat(stats, reset);
    ForEachCountStat(stats, reset);
    stats.num_device_alloc = 0;
    stats.num_device_free = 0;
  }

 private:
  std::mutex mutex_;
  ska::flat_hash_map<void*, size_t> live_;
  std::array<DeviceStats, kMaxDevices> stats_;
};

// Leaked on purpose: tensors may be freed during static destruction.
AllocationTable& Table() {
  static auto* table = new AllocationTable();
  return *table;
}

c10::DeviceIndex DeviceOf(void* ptr) {
  return static_cast<c10::DeviceIndex>(
      DeviceOfAddress(reinterpret_cast<uint64_t>(ptr)));
}

void DeleteDeviceMemory(void* ptr) {
  if (ptr == nullptr) return;
  Table().Remove(ptr, DeviceOf(ptr));
  // A deleter must not throw; a failed free (daemon gone) loses nothing.
  if (Free(ptr) != Error::kSuccess) GetLastError();
}

c10::Device CurrentDevice() {
  int device = 0;
  OPENREG_CHECK(GetDevice(&device));
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(device));
}

}  // namespace

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  const c10::Device device = CurrentDevice();
  if (nbytes == 0) return c10::DataPtr(nullptr, device);
  void* ptr = nullptr;
  OPENREG_CHECK(Malloc(&ptr, nbytes));
  Table().Add(ptr, nbytes, device.index());
  return c10::DataPtr(ptr, ptr, &DeleteDeviceMemory, device);
}

c10::DataPtr DeviceAllocator::Adopt(void* device_ptr, size_t nbytes,
                                    c10::DeviceIndex device) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (device_ptr == nullptr) return c10::DataPtr(nullptr, where);
  Table().Add(device_ptr, nbytes, device);
  return c10::DataPtr(device_ptr, device_ptr, &DeleteDeviceMemory, where);
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const {
  return &DeleteDeviceMemory;
}

void DeviceAllocator::copy_data(void* dest, const void* src,
                                std::size_t count) const {
  OPENREG_CHECK(Memcpy(dest, src, count, MemcpyKind::kDeviceToDevice));
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  // Nothing is cached on the client yet: freed memory returns to the daemon
  // as soon as the device has finished with it.
}

void DeviceAllocator::recordStream(const c10::DataPtr& /*ptr*/,
                                   c10::Stream /*stream*/) {
  // Frees are fenced against every stream of the session.
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  return Table().Get(device);
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  Table().ResetAccumulated(device);
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  Table().ResetPeak(device);
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(
    c10::DeviceIndex device) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  OPENREG_CHECK(MemGetInfo(&free_bytes, &total_bytes, device));
  return {free_bytes, total_bytes};
}

DeviceAllocator& GetDeviceAllocator() {
  static auto* allocator = new DeviceAllocator();
  return *allocator;
}

// Registered at load time; creating the allocator does not connect.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &GetDeviceAllocator());

}  // namespace openreg::torch_backend
