// The size of each device when --memory_per_device=auto (the default).
// An arena is reserved, not committed (memory/arena_allocator.h): a large
// device costs nothing until tensors touch it. What bounds it is the host:
// a client that fills every device must get torch.OutOfMemoryError from
// the daemon before the host's OOM killer ends the daemon (and every
// client with it). So all devices together get at most half the host's
// physical memory (the rest is for kernel temporaries, the clients and
// the system), each device between 2 GiB (the size before "auto") and
// 16 GiB, in whole 256 MiB.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_AUTO_MEMORY_SIZE_H_
#define OPENREG_DEVICE_DAEMON_SERVER_AUTO_MEMORY_SIZE_H_

#include <cstdint>

namespace openreg::daemon {

inline constexpr uint64_t kAutoMemoryPerDeviceMin = 2ull << 30;
inline constexpr uint64_t kAutoMemoryPerDeviceMax = 16ull << 30;

// The host's physical memory in bytes (sysconf), 0 if unknown.
uint64_t HostPhysicalMemory();

// The "auto" size of each of `devices` devices on a host with
// `host_memory` bytes (0: unknown, the minimum).
uint64_t AutoMemoryPerDevice(int devices, uint64_t host_memory);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_AUTO_MEMORY_SIZE_H_
