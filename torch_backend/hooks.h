// at::PrivateUse1HooksInterface for openreg: availability, device count,
// current device, generators, pointer queries and storage resizing.
#ifndef OPENREG_TORCH_BACKEND_HOOKS_H_
#define OPENREG_TORCH_BACKEND_HOOKS_H_

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace openreg::torch_backend {

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  // Connects to (or spawns) the daemon; false when none can be reached.
  bool isAvailable() const override;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  void init() const override {}
  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;
  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override;
  at::Device getDeviceFromPtr(void* data) const override;
  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override;
};

// Grows (never shrinks) a storage to at least `new_bytes`, keeping its
// contents: a device-to-device copy on the current stream.
void EnsureStorageBytes(const c10::Storage& storage, size_t new_bytes);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_HOOKS_H_
