// The emulated devices: one memory arena, one execution gate (kernel
// admission by stream priority), a health state and a few activity counters
// per device.
// Created once at startup and shared by every session.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "device_daemon/arena_allocator.h"
#include "device_daemon/device_health.h"
#include "device_daemon/execution_gate.h"

namespace openreg::daemon {

struct DeviceCounters {
  std::atomic<uint64_t> kernels_executed{0};
  std::atomic<uint64_t> copies_executed{0};
  std::atomic<uint64_t> kernel_failures{0};
};

// The multiprocessor count of a device: $OPENREG_MULTIPROCESSORS when set
// (1 to 4096), otherwise the host's hardware threads.
int DefaultMultiprocessorCount();

class Devices {
 public:
  // `multiprocessors` execution slots per device (kernels running at once
  // on it); 0 means DefaultMultiprocessorCount().
  static absl::StatusOr<std::unique_ptr<Devices>> Create(
      int count, uint64_t memory_per_device, int multiprocessors = 0);

  int count() const { return static_cast<int>(arenas_.size()); }
  uint64_t memory_per_device() const { return memory_per_device_; }
  // Execution slots per device, reported as its multiprocessor count.
  int multiprocessors() const { return multiprocessors_; }
  bool IsValid(int device) const { return device >= 0 && device < count(); }

  // Only for IsValid(device).
  ArenaAllocator& arena(int device) const { return *arenas_[device]; }
  DeviceCounters& counters(int device) const { return *counters_[device]; }
  ExecutionGate& gate(int device) const { return *gates_[device]; }
  DeviceHealth& health(int device) const { return *health_[device]; }

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
  std::vector<std::unique_ptr<ExecutionGate>> gates_;
  std::vector<std::unique_ptr<DeviceHealth>> health_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_H_
