#include "torch_backend/generator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <cstring>
#include <mutex>
#include <optional>

#include "data_plane/device_address.h"
#include "torch_backend/graphs/capture_registry.h"

namespace openreg::torch_backend {

GeneratorImpl::GeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void GeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void GeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }

uint64_t GeneratorImpl::get_offset() const { return offset_; }

uint64_t GeneratorImpl::current_seed() const { return seed_; }

uint64_t GeneratorImpl::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom();
  set_current_seed(random);
  return random;
}

void GeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(new_state.numel() == kStateBytes, "openreg: RNG state must hold ",
              kStateBytes, " bytes (seed and offset), got ", new_state.numel());
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof(seed_));
  std::memcpy(&offset_, bytes + sizeof(seed_), sizeof(offset_));
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  at::Tensor state = at::detail::empty_cpu({kStateBytes}, at::kByte,
                                           /*layout=*/std::nullopt,
                                           /*device=*/std::nullopt,
                                           /*pin_memory=*/std::nullopt,
                                           /*memory_format=*/std::nullopt);
  auto* bytes = state.mutable_data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof(seed_));
  std::memcpy(bytes + sizeof(seed_), &offset_, sizeof(offset_));
  return state.getIntrusivePtr();
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  auto* copy = new GeneratorImpl(device_.index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& DefaultGenerator(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              "openreg: invalid device index ", static_cast<int>(device),
              " for a generator");
  static auto* generators = new std::array<at::Generator, kMaxDevices>();
  static auto* once = new std::array<std::once_flag, kMaxDevices>();
  std::call_once((*once)[device], [device] {
    (*generators)[device] = at::make_generator<GeneratorImpl>(device);
  });
  return (*generators)[device];
}

GeneratorDraw TakeDraw(const at::Generator& generator,
                       c10::DeviceIndex device) {
  const at::Generator& source =
      generator.defined() ? generator : DefaultGenerator(device);
  auto* impl = at::check_generator<GeneratorImpl>(source);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  if (AnyCaptureActive()) {
    if (std::optional<GeneratorDraw> captured = CaptureDraw(impl, device)) {
      return *captured;
    }
  }
  GeneratorDraw draw{impl->current_seed(), impl->get_offset()};
  // One step per op is enough: the daemon hashes (seed, offset) into a
  // fresh engine, so neighbouring offsets give unrelated streams.
  impl->set_offset(draw.offset + 1);
  return draw;
}

}  // namespace openreg::torch_backend
