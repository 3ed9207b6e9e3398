#include "torch_backend/device_allocator.h"

#include <array>
#include <atomic>
#include <mutex>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "data_plane/device_address.h"
#include "openreg/graphs.h"
#include "openreg/runtime.h"
#include "torch_backend/block_cache.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/graphs/capture_registry.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

// The history settings every cache follows (RecordHistory), also those
// created later. Leaked like the caches.
struct History {
  std::mutex mutex;
  HistorySettings settings;
};
History& GlobalHistory() {
  static auto* history = new History();
  return *history;
}

std::array<std::atomic<BlockCache*>, kMaxDevices>& Caches() {
  static auto* caches = new std::array<std::atomic<BlockCache*>, kMaxDevices>();
  return *caches;
}

// One cache per device, created on first use and leaked on purpose:
// tensors may be freed during static destruction.
BlockCache& CacheFor(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              "openreg: invalid device index ", static_cast<int>(device));
  // Every allocation and free asks: once the cache exists, one atomic load
  // (libstdc++'s call_once sets two thread-locals even when done).
  if (BlockCache* cache = Caches()[device].load(std::memory_order_acquire);
      C10_LIKELY(cache != nullptr)) {
    return *cache;
  }
  static auto* once = new std::array<std::once_flag, kMaxDevices>();
  std::call_once((*once)[device], [device] {
    auto* cache =
        new BlockCache(device, std::make_unique<RuntimeDeviceMemory>(device));
    History& history = GlobalHistory();
    std::lock_guard<std::mutex> lock(history.mutex);
    cache->SetHistory(history.settings, /*clear=*/false);
    Caches()[device].store(cache, std::memory_order_release);
  });
  return *Caches()[device].load(std::memory_order_acquire);
}

void DeleteDeviceMemory(void* ptr) {
  if (ptr == nullptr) return;
  const auto device = static_cast<c10::DeviceIndex>(
      DeviceOfAddress(reinterpret_cast<uint64_t>(ptr)));
  CacheFor(device).Free(ptr);
}

// This thread's private pool per device (use_mem_pool); 0 = default.
thread_local std::array<PoolId, kMaxDevices> thread_pools{};

// Who holds each private pool (MemPool objects, graphs).
struct PoolReferences {
  std::mutex mutex;
  absl::flat_hash_map<PoolId, int> count;
};

PoolReferences& GlobalPoolReferences() {
  static auto* references = new PoolReferences;
  return *references;
}

// Where an allocation on `stream` of `device` goes: the pool of the graph
// capturing the stream, else this thread's pool. A graph's pool grows
// while its capture forbids allocating (a capture of mode global): like
// CUDA's caching allocator, the pool's own segments are allocated in
// relaxed mode, and only allocations outside the pool are refused.
class AllocationRoute {
 public:
  explicit AllocationRoute(c10::DeviceIndex device)
      : pool_(thread_pools[device]) {
    if (!AnyCaptureActive()) return;
    const std::optional<PoolId> capture_pool = CapturePoolOf(device);
    if (!capture_pool.has_value()) return;
    pool_ = *capture_pool;
    mode_ = CaptureMode::kRelaxed;
    relaxed_ = ExchangeCaptureMode(&mode_) == Error::kSuccess;
  }
  ~AllocationRoute() {
    if (relaxed_) ExchangeCaptureMode(&mode_);
  }
  AllocationRoute(const AllocationRoute&) = delete;
  AllocationRoute& operator=(const AllocationRoute&) = delete;

  PoolId pool() const { return pool_; }

 private:
  PoolId pool_;
  CaptureMode mode_ = CaptureMode::kGlobal;
  bool relaxed_ = false;
};

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
  // Blocks are cached per stream: reuse on the stream that freed a block
  // is ordered by the stream itself, as with CUDA's caching allocator.
  const auto stream = static_cast<StreamId>(CurrentStream(device.index()).id());
  const AllocationRoute route(device.index());
  void* ptr = CacheFor(device.index()).Allocate(nbytes, stream, route.pool());
  return c10::DataPtr(ptr, ptr, &DeleteDeviceMemory, device);
}

c10::DataPtr DeviceAllocator::Adopt(void* device_ptr, size_t nbytes,
                                    c10::DeviceIndex device) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (device_ptr == nullptr) return c10::DataPtr(nullptr, where);
  CacheFor(device).Adopt(device_ptr, nbytes,
                         static_cast<StreamId>(CurrentStream(device).id()));
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
  int count = 0;
  if (!IsConnected() ||
      IgnoreError(GetDeviceCount(&count),
                  "no device: nothing was ever allocated") != Error::kSuccess) {
    return;
  }
  for (int device = 0; device < count; ++device) {
    CacheFor(static_cast<c10::DeviceIndex>(device)).EmptyCache();
  }
}

bool DeviceAllocator::MarkShared(void* ptr, c10::DeviceIndex device) {
  return CacheFor(device).MarkShared(ptr);
}

size_t DeviceAllocator::CollectShared() {
  int count = 0;
  if (!IsConnected() ||
      IgnoreError(GetDeviceCount(&count),
                  "no device: nothing was ever shared") != Error::kSuccess) {
    return 0;
  }
  size_t held = 0;
  for (int device = 0; device < count; ++device) {
    held += CacheFor(static_cast<c10::DeviceIndex>(device)).CollectShared();
  }
  return held;
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr,
                                   c10::Stream stream) {
  if (ptr.get() == nullptr) return;
  CacheFor(ptr.device().index())
      .RecordStream(ptr.get(), static_cast<StreamId>(stream.id()));
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  return CacheFor(device).Stats();
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  CacheFor(device).ResetAccumulatedStats();
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  CacheFor(device).ResetPeakStats();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(
    c10::DeviceIndex device) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  OPENREG_CHECK(MemGetInfo(&free_bytes, &total_bytes, device));
  return {free_bytes, total_bytes};
}

void DeviceAllocator::SetMemoryFraction(double fraction,
                                        c10::DeviceIndex device) {
  const std::pair<size_t, size_t> info = getMemoryInfo(device);
  CacheFor(device).SetMemoryFraction(fraction, info.second);
}

void* DeviceAllocator::RawAlloc(size_t size, c10::DeviceIndex device,
                                StreamId stream) {
  if (size == 0) return nullptr;
  const AllocationRoute route(device);
  return CacheFor(device).Allocate(size, stream, route.pool());
}

PoolId DeviceAllocator::NewPoolId() {
  static std::atomic<PoolId> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

PoolId DeviceAllocator::CreatePool() {
  const PoolId pool = NewPoolId();
  RetainPool(pool);
  return pool;
}

void DeviceAllocator::RetainPool(PoolId pool) {
  PoolReferences& references = GlobalPoolReferences();
  std::lock_guard<std::mutex> lock(references.mutex);
  ++references.count[pool];
}

PoolId DeviceAllocator::SetThreadPool(c10::DeviceIndex device, PoolId pool) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              "openreg: invalid device index ", static_cast<int>(device));
  const PoolId previous = thread_pools[device];
  thread_pools[device] = pool;
  return previous;
}

void DeviceAllocator::ReleasePool(PoolId pool) {
  {
    PoolReferences& references = GlobalPoolReferences();
    std::lock_guard<std::mutex> lock(references.mutex);
    auto found = references.count.find(pool);
    if (found == references.count.end()) return;  // never held
    if (--found->second > 0) return;
    references.count.erase(found);
  }
  for (std::atomic<BlockCache*>& cache : Caches()) {
    BlockCache* created = cache.load(std::memory_order_acquire);
    if (created != nullptr) created->ReleasePool(pool);
  }
}

void DeviceAllocator::RawDelete(void* ptr) { DeleteDeviceMemory(ptr); }

void DeviceAllocator::RecordHistory(const HistorySettings& settings,
                                    bool clear) {
  History& history = GlobalHistory();
  std::lock_guard<std::mutex> lock(history.mutex);
  history.settings = settings;
  for (std::atomic<BlockCache*>& cache : Caches()) {
    BlockCache* created = cache.load(std::memory_order_acquire);
    if (created != nullptr) created->SetHistory(settings, clear);
  }
}

std::vector<std::pair<c10::DeviceIndex, CacheSnapshot>>
DeviceAllocator::Snapshots() {
  std::vector<std::pair<c10::DeviceIndex, CacheSnapshot>> snapshots;
  for (int device = 0; device < kMaxDevices; ++device) {
    BlockCache* cache = Caches()[device].load(std::memory_order_acquire);
    if (cache != nullptr) {
      snapshots.emplace_back(static_cast<c10::DeviceIndex>(device),
                             cache->Snapshot());
    }
  }
  return snapshots;
}

DeviceAllocator& GetDeviceAllocator() {
  static auto* allocator = new DeviceAllocator();
  return *allocator;
}

// Registered at load time; creating the allocator does not connect.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &GetDeviceAllocator());

}  // namespace openreg::torch_backend
