#include "torch_backend/generator.h"

#include <array>
#include <mutex>

#include "data_plane/device_address.h"

namespace openreg::torch_backend {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device) {
  device_ = c10::Device(c10::DeviceType::PrivateUse1, device);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

const at::Generator& DefaultGenerator(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              "openreg: invalid device index ", static_cast<int>(device),
              " for a generator");
  static auto* generators = new std::array<at::Generator, kMaxDevices>();
  static auto* once = new std::array<std::once_flag, kMaxDevices>();
  std::call_once((*once)[device], [device] {
    (*generators)[device] = at::make_generator<GeneratorImpl>(device);
    (*generators)[device].set_current_seed(
        c10::detail::getNonDeterministicRandom());
  });
  return (*generators)[device];
}

}  // namespace openreg::torch_backend
