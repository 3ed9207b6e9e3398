// The PrivateUse1 DeviceGuardImplInterface: current device, streams and
// events for `openreg`, all backed by the runtime client.
#ifndef OPENREG_TORCH_BACKEND_DEVICE_GUARD_H_
#define OPENREG_TORCH_BACKEND_DEVICE_GUARD_H_

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "data_plane/stream_priority.h"

namespace openreg::torch_backend {

// Stream priorities (range and clamping) are data_plane/stream_priority.h,
// shared with the daemon's execution gates.

// Streams kept per device and priority for getNewStream and
// getStreamFromGlobalPool, handed out round robin like CUDA's pool (CUDA
// keeps 32; every openreg stream is a daemon thread and a session segment
// has a limited number of slots, so fewer, created on first use).
inline constexpr int kPoolStreamsPerPriority = 8;
// A stream of `device`'s pool for `priority` (clamped).
c10::Stream StreamFromPool(c10::DeviceIndex device, int priority);
// A new stream of `device` that the pool never hands out, for work that
// may wait on another process (occl's point-to-point transfers): sharing a
// stream with unrelated work could make that work wait too, or deadlock.
// The session's stream slots are limited: it throws when they run out.
c10::Stream NewDedicatedStream(c10::DeviceIndex device);
// The priority `stream` was created with (0 for default streams).
int StreamPriority(const c10::Stream& stream);

// The calling thread's current stream on `device` (its default stream until
// changed by a stream guard).
c10::Stream CurrentStream(c10::DeviceIndex device);
c10::Stream DefaultStream(c10::DeviceIndex device);
// Sets the calling thread's current stream on the stream's device; returns
// the previous one.
c10::Stream ExchangeStream(c10::Stream stream);

class DeviceGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  static constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool is_high_priority) const override;
  c10::Stream getNewStream(c10::Device device, int priority) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  c10::DeviceIndex deviceCount() const noexcept override;
  // torch.accelerator.get_device_capability(): the dtypes openreg tensors
  // can have (every dtype but the quantized ones, which the daemon refuses).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override;

  void destroyEvent(
      void* event, const c10::DeviceIndex device_index) const noexcept override;
  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  double elapsedTime(void* start_event, void* end_event,
                     const c10::DeviceIndex device_index) const override;

  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DEVICE_GUARD_H_
