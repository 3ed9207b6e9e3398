// Device addresses are opaque 64-bit values. They are non-canonical x86-64
// addresses (top byte 0x0f), so a client that dereferences one faults at
// once instead of reading unrelated host memory.
#ifndef OPENREG_DATA_PLANE_DEVICE_ADDRESS_H_
#define OPENREG_DATA_PLANE_DEVICE_ADDRESS_H_

#include <cstdint>

namespace openreg {

inline constexpr uint64_t kDeviceAddressTag = 0x0f00000000000000ull;
inline constexpr uint64_t kDeviceAddressTagMask = 0xff00000000000000ull;
inline constexpr int kDeviceIndexShift = 44;
inline constexpr uint64_t kDeviceOffsetMask = (1ull << kDeviceIndexShift) - 1;
inline constexpr int kMaxDevices = 64;

constexpr uint64_t MakeDeviceAddress(int device, uint64_t offset) {
  return kDeviceAddressTag |
         (static_cast<uint64_t>(device) << kDeviceIndexShift) | offset;
}

constexpr bool IsDeviceAddress(uint64_t address) {
  return (address & kDeviceAddressTagMask) == kDeviceAddressTag &&
         ((address & ~kDeviceAddressTagMask) >> kDeviceIndexShift) <
             static_cast<uint64_t>(kMaxDevices);
}

// Only meaningful when IsDeviceAddress(address).
constexpr int DeviceOfAddress(uint64_t address) {
  return static_cast<int>((address & ~kDeviceAddressTagMask) >>
                          kDeviceIndexShift);
}

constexpr uint64_t OffsetOfAddress(uint64_t address) {
  return address & kDeviceOffsetMask;
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_DEVICE_ADDRESS_H_
