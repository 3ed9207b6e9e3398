// The PrivateUse1 device allocator: a façade over one BlockCache per device
// (block_cache.h), which caches daemon memory obtained through the runtime
// client. Its statistics feed torch.openreg.memory_* and torch.accelerator.
#ifndef OPENREG_TORCH_BACKEND_DEVICE_ALLOCATOR_H_
#define OPENREG_TORCH_BACKEND_DEVICE_ALLOCATOR_H_

#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "openreg/runtime.h"
#include "torch_backend/block_cache.h"

namespace openreg::torch_backend {

class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Wraps memory the daemon allocated for this session (outputs of a
  // synchronous op) so that it is accounted and freed like our own.
  c10::DataPtr Adopt(void* device_ptr, size_t nbytes, c10::DeviceIndex device);

  // Caps this process's reserved memory on `device` (like
  // torch.cuda.set_per_process_memory_fraction).
  void SetMemoryFraction(double fraction, c10::DeviceIndex device);

  // IPC (torch.multiprocessing): marks the block at `ptr` as shared, so
  // that once freed it is reused only after no other process holds it
  // open. False when `ptr` is not a block of this allocator.
  bool MarkShared(void* ptr, c10::DeviceIndex device);
  // Returns freed shared blocks nobody holds open any more to the caches
  // (torch.openreg.ipc_collect); returns how many are still held.
  size_t CollectShared();

  // torch.openreg.caching_allocator_alloc / _delete: a block of `size`
  // bytes on `device` for use on `stream`, freed by RawDelete.
  void* RawAlloc(size_t size, c10::DeviceIndex device, StreamId stream);
  void RawDelete(void* ptr);

  // Private pools (torch.openreg.MemPool / use_mem_pool): a new pool id,
  // routing this thread's allocations on `device` to `pool` (0: the
  // default pool; returns the previous one), and the pool's release when
  // its owner is gone (on every device).
  // Pools are counted: CreatePool holds one reference for its caller,
  // RetainPool adds one (a graph capturing into the pool), ReleasePool
  // drops one and releases the pool's memory at the last.
  PoolId CreatePool();
  // A pool id nobody holds yet (torch.openreg.graph_pool_handle()).
  PoolId NewPoolId();
  void RetainPool(PoolId pool);
  PoolId SetThreadPool(c10::DeviceIndex device, PoolId pool);
  void ReleasePool(PoolId pool);

  // torch.openreg.memory._record_memory_history: applies to every device,
  // including those first used later.
  void RecordHistory(const HistorySettings& settings, bool clear);
  // Each used device's segments and recorded events (_snapshot).
  std::vector<std::pair<c10::DeviceIndex, CacheSnapshot>> Snapshots();
};

DeviceAllocator& GetDeviceAllocator();

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DEVICE_ALLOCATOR_H_
