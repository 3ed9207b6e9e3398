// The emulated devices: one memory arena, one scheduler (the device's pool
// of executor threads, device_scheduler.h), a health state and a few
// activity counters per device, and the doorbell page (data_plane/doorbell.h)
// that every client maps to wake the executors.
// Created once at startup and shared by every session.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_DEVICES_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_DEVICES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data_plane/doorbell.h"
#include "data_plane/shared_memory.h"
#include "device_daemon/devices/device_health.h"
#include "device_daemon/devices/device_scheduler.h"
#include "device_daemon/devices/utilization_monitor.h"
#include "device_daemon/memory/arena_allocator.h"

namespace openreg::daemon {

// What every device calls itself (DeviceProperties.name, openreg-smi).
inline constexpr char kDeviceName[] = "openreg emulated device";

struct DeviceCounters {
  std::atomic<uint64_t> kernels_executed{0};
  std::atomic<uint64_t> copies_executed{0};
  // Bytes moved by the copy commands of this device's streams, by
  // direction (peer copies count as device to device).
  std::atomic<uint64_t> host_to_device_bytes{0};
  std::atomic<uint64_t> device_to_host_bytes{0};
  std::atomic<uint64_t> device_to_device_bytes{0};
  std::atomic<uint64_t> kernel_failures{0};
  // Graph replays that ran every recorded command (docs/GRAPHS.md).
  std::atomic<uint64_t> graphs_replayed{0};
  // Recorded launches a replay decoded (a graph's first replay, or the
  // first after the session freed memory), and those it ran as an earlier
  // replay decoded them (kernels/decoded_launch.h).
  std::atomic<uint64_t> graph_launches_decoded{0};
  std::atomic<uint64_t> graph_launches_reused{0};
  // Reused launches that ran as a plain loop, not through ATen
  // (kernels/pointwise_kernel.h).
  std::atomic<uint64_t> graph_launches_pointwise{0};
  // Eager launches a plain loop ran instead of ATen (the same loops).
  std::atomic<uint64_t> launches_pointwise{0};
};

// Most executor threads a device may have (--executors_per_device,
// $OPENREG_MULTIPROCESSORS): each is a thread of the daemon, so a larger
// count is certainly a typo.
inline constexpr int kMaxExecutorsPerDevice = 4096;

// The multiprocessor count of a device: $OPENREG_MULTIPROCESSORS when set
// (1 to kMaxExecutorsPerDevice), otherwise the host's hardware threads.
int DefaultMultiprocessorCount();

class Devices {
 public:
  // `executors` executor threads per device (commands running at once on
  // it, reported as its multiprocessor count); 0 means
  // DefaultMultiprocessorCount().
  static absl::StatusOr<std::unique_ptr<Devices>> Create(
      int count, uint64_t memory_per_device, int executors = 0);
  // Stops every device's executors: sessions must be closed first.
  ~Devices();

  int count() const { return static_cast<int>(arenas_.size()); }
  uint64_t memory_per_device() const { return memory_per_device_; }
  // Executor threads per device, reported as its multiprocessor count.
  int multiprocessors() const { return multiprocessors_; }
  bool IsValid(int device) const { return device >= 0 && device < count(); }

  // Only for IsValid(device).
  ArenaAllocator& arena(int device) const { return *arenas_[device]; }
  DeviceCounters& counters(int device) const { return *counters_[device]; }
  DeviceScheduler& scheduler(int device) const { return *schedulers_[device]; }
  Doorbell* doorbell(int device) const {
    return &static_cast<DoorbellPage*>(doorbell_page_.data())->devices[device];
  }
  DeviceHealth& health(int device) const { return *health_[device]; }
  // Every device's utilization over the last second (sampled by the
  // daemon's main loop).
  UtilizationMonitor& utilization() const { return *utilization_; }

  // The doorbell page every client maps (its fd is passed at attach).
  const SharedMemory& doorbell_page() const { return doorbell_page_; }

  // Brings `device` back from the FAULT or lost state. Its memory is lost:
  // blocks allocated before the reset fail every later use
  // (DeviceBuffer::lost()) until their sessions free them.
  void Reset(int device);

 private:
  Devices() = default;

  uint64_t memory_per_device_ = 0;
  int multiprocessors_ = 0;
  std::vector<std::unique_ptr<ArenaAllocator>> arenas_;
  std::vector<std::unique_ptr<DeviceCounters>> counters_;
  SharedMemory doorbell_page_;
  // Last: the executors stop before anything they may use.
  std::vector<std::unique_ptr<DeviceScheduler>> schedulers_;
  std::vector<std::unique_ptr<DeviceHealth>> health_;
  std::unique_ptr<UtilizationMonitor> utilization_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_DEVICES_H_
