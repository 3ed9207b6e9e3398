#include "device_daemon/server/auto_memory_size.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace openreg::daemon {

uint64_t HostPhysicalMemory() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint64_t AutoMemoryPerDevice(int devices, uint64_t host_memory) {
  constexpr uint64_t kGranule = 256ull << 20;
  if (devices < 1) devices = 1;
  const uint64_t share = host_memory / 2 / static_cast<uint64_t>(devices);
  const uint64_t rounded = share / kGranule * kGranule;
  return std::clamp(rounded, kAutoMemoryPerDeviceMin, kAutoMemoryPerDeviceMax);
}

}  // namespace openreg::daemon
