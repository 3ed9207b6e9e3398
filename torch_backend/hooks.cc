#include "torch_backend/hooks.h"

#include <c10/core/DeviceGuard.h>

#include "torch_backend/device_guard.h"
#include "torch_backend/generator.h"
#include "torch_backend/host_allocator.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

}  // namespace

bool Hooks::isAvailable() const { return deviceCount() > 0; }

bool Hooks::hasPrimaryContext(c10::DeviceIndex /*device_index*/) const {
  return IsConnected();
}

c10::DeviceIndex Hooks::deviceCount() const {
  return DeviceGuardImpl().deviceCount();
}

void Hooks::setCurrentDevice(c10::DeviceIndex device) const {
  OPENREG_CHECK(SetDevice(device));
}

c10::DeviceIndex Hooks::getCurrentDevice() const {
  int device = 0;
  OPENREG_CHECK(GetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex device) const {
  const c10::DeviceIndex previous = getCurrentDevice();
  if (device != previous) setCurrentDevice(device);
  return previous;
}

c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  if (device < 0 || device >= deviceCount()) return getCurrentDevice();
  return exchangeDevice(device);
}

const at::Generator& Hooks::getDefaultGenerator(
    c10::DeviceIndex device_index) const {
  return DefaultGenerator(device_index < 0 ? getCurrentDevice() : device_index);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return at::make_generator<GeneratorImpl>(device_index < 0 ? getCurrentDevice()
                                                            : device_index);
}

at::Device Hooks::getDeviceFromPtr(void* data) const {
  int device = 0;
  OPENREG_CHECK(PointerGetDevice(data, &device));
  return at::Device(kType, static_cast<c10::DeviceIndex>(device));
}

bool Hooks::isPinnedPtr(const void* data) const {
  // Memory from openreg::HostAlloc (the host allocator's blocks), shared
  // with the daemon.
  return IsPinnedRange(data, 0);
}

at::Allocator* Hooks::getPinnedMemoryAllocator() const {
  return &GetHostAllocator();
}

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage,
                                   size_t new_bytes) const {
  EnsureStorageBytes(storage, new_bytes);
}

void EnsureStorageBytes(const c10::Storage& storage, size_t new_bytes) {
  if (storage.nbytes() >= new_bytes) return;
  TORCH_CHECK(storage.resizable(),
              "Trying to resize storage that is not resizable");
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const c10::DeviceGuard guard(impl->device());
  c10::DataPtr grown = impl->allocator()->allocate(new_bytes);
  if (impl->nbytes() > 0) {
    const c10::Stream stream = CurrentStream(impl->device().index());
    OPENREG_CHECK(MemcpyAsync(grown.get(), impl->data(), impl->nbytes(),
                              MemcpyKind::kDeviceToDevice,
                              static_cast<StreamId>(stream.id())));
  }
  // The old block's free is fenced behind the copy by the runtime.
  impl->set_data_ptr_noswap(std::move(grown));
  impl->set_nbytes(new_bytes);
}

static bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

}  // namespace openreg::torch_backend
