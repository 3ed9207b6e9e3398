#include "device_daemon/devices/devices.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data_plane/device_address.h"

namespace openreg::daemon {

int DefaultMultiprocessorCount() {
  // $OPENREG_MULTIPROCESSORS lets tests and experiments fix the count (and
  // so the contention for execution slots) independently of the host.
  if (const char* value = std::getenv("OPENREG_MULTIPROCESSORS")) {
    int count = 0;
    if (absl::SimpleAtoi(value, &count) && count >= 1 &&
        count <= kMaxExecutorsPerDevice) {
      return count;
    }
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::StatusOr<std::unique_ptr<Devices>> Devices::Create(
    int count, uint64_t memory_per_device, int executors) {
  if (executors <= 0) executors = DefaultMultiprocessorCount();
  if (count < 1 || count > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device count must be between 1 and ", kMaxDevices, ", got ", count));
  }
  std::unique_ptr<Devices> devices(new Devices());
  devices->multiprocessors_ = executors;
  absl::StatusOr<SharedMemory> doorbells =
      SharedMemory::Create("openreg-doorbells", kDoorbellPageBytes);
  if (!doorbells.ok()) return doorbells.status();
  devices->doorbell_page_ = *std::move(doorbells);
  for (int device = 0; device < count; ++device) {
    absl::StatusOr<std::unique_ptr<ArenaAllocator>> arena =
        ArenaAllocator::Create(device, memory_per_device);
    if (!arena.ok()) return arena.status();
    devices->memory_per_device_ = (*arena)->capacity();
    devices->arenas_.push_back(*std::move(arena));
    devices->counters_.push_back(std::make_unique<DeviceCounters>());
    devices->health_.push_back(std::make_unique<DeviceHealth>(device));
  }
  for (int device = 0; device < count; ++device) {
    devices->schedulers_.push_back(std::make_unique<DeviceScheduler>(
        device, executors, devices->doorbell(device)));
  }
  Devices* const owner = devices.get();
  devices->utilization_ =
      std::make_unique<UtilizationMonitor>(count, [owner](int device) {
        return owner->scheduler(device).BusyNanoseconds();
      });
  return devices;
}

Devices::~Devices() {
  utilization_.reset();
  schedulers_.clear();
}

void Devices::Reset(int device) {
  arena(device).AdvanceGeneration();
  health(device).Reset();
}

}  // namespace openreg::daemon
