#include "torch_backend/device_guard.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "data_plane/device_address.h"
#include "openreg/runtime.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/kernel_warnings.h"
#include "torch_backend/runtime_error.h"
#include "torch_backend/sync_debug.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kType = DeviceGuardImpl::kDeviceType;

// Stream ids are runtime stream slots; device d's default stream is slot d.
c10::Stream MakeStream(c10::DeviceIndex device, StreamId slot) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, device),
                     static_cast<c10::StreamId>(slot));
}

// Each device's current stream slot plus one; 0 (as zero-initialized)
// means "the device's default stream". Trivially initialized, so reading
// it on every op needs no thread_local initialization guard.
thread_local std::array<int64_t, kMaxDevices> current_stream_slots_plus_one{};

c10::DeviceIndex ResolveDevice(c10::DeviceIndex device) {
  if (device >= 0) return device;
  int current = 0;
  OPENREG_CHECK(GetDevice(&current));
  return static_cast<c10::DeviceIndex>(current);
}

void CheckDeviceIndex(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices,
              "openreg: The device index is out of range: device ",
              static_cast<int>(device), " (openreg devices are 0 to ",
              kMaxDevices - 1, " at most)");
}

// Events cross the c10 interface as void*: runtime event id + 1, so that
// nullptr means "not created yet", with kReusableBit set on events without
// timing (EventPool).
constexpr uintptr_t kReusableBit = uintptr_t{1} << 62;
EventId EventFromHandle(void* handle) {
  return static_cast<EventId>(
      (reinterpret_cast<uintptr_t>(handle) & ~kReusableBit) - 1);
}
void* HandleFromEvent(EventId event, bool reusable = false) {
  // c10 holds events as void*; this one is never dereferenced.
  return reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
      (static_cast<uintptr_t>(event) + 1) | (reusable ? kReusableBit : 0));
}
bool IsReusable(void* handle) {
  return (reinterpret_cast<uintptr_t>(handle) & kReusableBit) != 0;
}

// Events without timing, kept when c10 destroys them and handed out again.
// Creating and destroying a runtime event are control-plane round trips
// (and destroying one first waits for its pending record), while
// c10::Event users make one per use: a collective's ordering events, FSDP's
// and DDP's stream syncs. Re-recording an event is what CUDA allows too; a
// timing event is never reused (its timestamp belongs to its record).
class EventPool {
 public:
  // An event of `device` from the pool, if one is left and still belongs
  // to this session (a runtime shut down since then made it stale).
  std::optional<EventId> Take(c10::DeviceIndex device) {
    absl::MutexLock lock(&mutex_);
    std::vector<EventId>& free = free_[device];
    while (!free.empty()) {
      const EventId event = free.back();
      free.pop_back();
      if (IgnoreError(EventQuery(event),
                      "a pooled event of an earlier session is stale") !=
          Error::kInvalidHandle) {
        return event;
      }
    }
    return std::nullopt;
  }
  // Keeps `event` for reuse; false when the pool of `device` is full.
  bool Give(c10::DeviceIndex device, EventId event) {
    absl::MutexLock lock(&mutex_);
    std::vector<EventId>& free = free_[device];
    if (free.size() >= kKeptPerDevice) return false;
    free.push_back(event);
    return true;
  }

 private:
  // Far below a session's event slots (4096 by default).
  static constexpr size_t kKeptPerDevice = 64;
  absl::Mutex mutex_;
  std::array<std::vector<EventId>, kMaxDevices> free_ ABSL_GUARDED_BY(mutex_);
};

EventPool& Events() {
  // Leaked: events may be destroyed from static destructors.
  static auto* pool = new EventPool();
  return *pool;
}

// One device's streams of one priority, created on first use.
struct StreamPool {
  absl::Mutex mutex;
  std::vector<StreamId> streams ABSL_GUARDED_BY(mutex);
  // The session ran out of stream slots: reuse the streams created so far.
  bool full ABSL_GUARDED_BY(mutex) = false;
  uint32_t next ABSL_GUARDED_BY(mutex) = 0;
};

StreamPool& PoolOf(c10::DeviceIndex device, int priority) {
  // Leaked: pool streams may be used from static destructors.
  static auto* pools =
      new std::array<std::array<StreamPool, kStreamPriorityLevels>,
                     kMaxDevices>();
  return (*pools)[device][kLeastStreamPriority - priority];
}

// False when `stream` is no longer a stream of `device` (the runtime was
// shut down and a new session attached since it was created).
bool StillValid(StreamId stream, c10::DeviceIndex device) {
  int actual = -1;
  if (IgnoreError(StreamGetDevice(stream, &actual),
                  "a stream of an earlier session is stale") !=
      Error::kSuccess) {
    return false;
  }
  return actual == device;
}

}  // namespace

c10::Stream StreamFromPool(c10::DeviceIndex device, int priority) {
  device = ResolveDevice(device);
  CheckDeviceIndex(device);
  priority = ClampStreamPriority(priority);
  StreamPool& pool = PoolOf(device, priority);
  absl::MutexLock lock(&pool.mutex);
  if (!pool.streams.empty() && !StillValid(pool.streams.front(), device)) {
    pool.streams.clear();
    pool.full = false;
  }
  const uint32_t pick = pool.next++ % kPoolStreamsPerPriority;
  if (pick >= pool.streams.size() && !pool.full) {
    c10::DeviceGuard guard(c10::Device(kType, device));
    StreamId created = 0;
    const Error error = StreamCreate(&created, priority);
    if (error == Error::kSuccess) {
      pool.streams.push_back(created);
      return MakeStream(device, created);
    }
    if (error != Error::kResourceExhausted || pool.streams.empty()) {
      OPENREG_CHECK(error);
    }
    IgnoreError(error, "a full pool makes do with the streams it has");
    pool.full = true;
  }
  return MakeStream(device, pool.streams[pick % pool.streams.size()]);
}

c10::Stream NewDedicatedStream(c10::DeviceIndex device) {
  device = ResolveDevice(device);
  CheckDeviceIndex(device);
  c10::DeviceGuard guard(c10::Device(kType, device));
  StreamId created = 0;
  OPENREG_CHECK(StreamCreate(&created, kLeastStreamPriority));
  return MakeStream(device, created);
}

int StreamPriority(const c10::Stream& stream) {
  const c10::DeviceIndex device = stream.device_index();
  if (device < 0 || device >= kMaxDevices) return kLeastStreamPriority;
  for (int priority = kGreatestStreamPriority; priority < kLeastStreamPriority;
       ++priority) {
    StreamPool& pool = PoolOf(device, priority);
    absl::MutexLock lock(&pool.mutex);
    if (std::find(pool.streams.begin(), pool.streams.end(),
                  static_cast<StreamId>(stream.id())) != pool.streams.end()) {
      return priority;
    }
  }
  return kLeastStreamPriority;
}

c10::Stream DefaultStream(c10::DeviceIndex device) {
  device = ResolveDevice(device);
  return MakeStream(device, static_cast<StreamId>(device));
}

c10::Stream CurrentStream(c10::DeviceIndex device) {
  device = ResolveDevice(device);
  // Every launch asks: the check's message is built only when it fails.
  if (C10_UNLIKELY(device < 0 || device >= kMaxDevices)) {
    CheckDeviceIndex(device);
  }
  const int64_t slot_plus_one = current_stream_slots_plus_one[device];
  // A device's default stream is the slot of its index (DefaultStream).
  return MakeStream(device, slot_plus_one == 0
                                ? static_cast<StreamId>(device)
                                : static_cast<StreamId>(slot_plus_one - 1));
}

c10::Stream ExchangeStream(c10::Stream stream) {
  const c10::DeviceIndex device = stream.device_index();
  c10::Stream previous = CurrentStream(device);
  current_stream_slots_plus_one[device] = stream.id() + 1;
  return previous;
}

c10::Device DeviceGuardImpl::exchangeDevice(c10::Device device) const {
  c10::Device previous = getDevice();
  if (previous.index() != device.index()) setDevice(device);
  return previous;
}

c10::Device DeviceGuardImpl::getDevice() const {
  int device = 0;
  OPENREG_CHECK(GetDevice(&device));
  return c10::Device(kType, static_cast<c10::DeviceIndex>(device));
}

void DeviceGuardImpl::setDevice(c10::Device device) const {
  TORCH_CHECK(device.type() == kType,
              "openreg: expected an openreg device, got ", device);
  if (device.index() < 0) return;
  OPENREG_CHECK(SetDevice(device.index()));
}

void DeviceGuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  // A DeviceGuard restores its device on exit even when it never changed
  // it (every op's guard, in the usual case): as CUDA's MaybeSetDevice,
  // nothing to do then.
  if (device.index() < 0 || device.index() == getDevice().index()) return;
  SetDevice(device.index());
}

c10::Stream DeviceGuardImpl::getStream(c10::Device device) const {
  return CurrentStream(device.index());
}

c10::Stream DeviceGuardImpl::getDefaultStream(c10::Device device) const {
  return DefaultStream(device.index());
}

// As on CUDA, "new" streams come from the pool too: a program that makes
// streams in a loop reuses them instead of exhausting the session's slots.
c10::Stream DeviceGuardImpl::getStreamFromGlobalPool(
    c10::Device device, bool is_high_priority) const {
  return StreamFromPool(device.index(), is_high_priority
                                            ? kGreatestStreamPriority
                                            : kLeastStreamPriority);
}

c10::Stream DeviceGuardImpl::getNewStream(c10::Device device,
                                          int priority) const {
  return StreamFromPool(device.index(), priority);
}

c10::Stream DeviceGuardImpl::exchangeStream(c10::Stream stream) const {
  return ExchangeStream(stream);
}

c10::DeviceIndex DeviceGuardImpl::deviceCount() const noexcept {
  int count = 0;
  if (IgnoreError(GetDeviceCount(&count),
                  "no device is deviceCount()'s answer") != Error::kSuccess) {
    return 0;
  }
  return static_cast<c10::DeviceIndex>(count);
}

c10::DeviceCapability DeviceGuardImpl::getDeviceCapability(
    c10::Device device) const {
  const c10::DeviceIndex count = deviceCount();
  TORCH_CHECK(
      device.has_index() && device.index() >= 0 && device.index() < count,
      "Invalid device index ", device,
      " for get_device_capability: openreg has ", count, " devices");
  // Every dtype, and of the quantized ones those with per-tensor affine
  // tensors on openreg (kernels/quantized_ops.cc).
  c10::DeviceCapability capability;
  auto& dtypes = capability.capability_data.supported_scalar_types;
  dtypes.has_QUInt4x2 = false;
  dtypes.has_QUInt2x4 = false;
  return capability;
}

void DeviceGuardImpl::destroyEvent(
    void* event, const c10::DeviceIndex device_index) const noexcept {
  if (event == nullptr) return;
  if (IsReusable(event) && device_index >= 0 && device_index < kMaxDevices &&
      Events().Give(device_index, EventFromHandle(event))) {
    return;
  }
  IgnoreError(EventDestroy(EventFromHandle(event)),
              "noexcept; a lost daemon took the event with it");
}

void DeviceGuardImpl::record(void** event, const c10::Stream& stream,
                             const c10::DeviceIndex device_index,
                             const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "openreg: event device ", static_cast<int>(device_index),
              " does not match the recording stream's device ",
              static_cast<int>(stream.device_index()));
  if (*event == nullptr) {
    const bool timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    std::optional<EventId> pooled;
    if (!timing) pooled = Events().Take(stream.device_index());
    if (pooled.has_value()) {
      *event = HandleFromEvent(*pooled, /*reusable=*/true);
    } else {
      c10::DeviceGuard guard(stream.device());
      EventId created = 0;
      OPENREG_CHECK(
          EventCreate(&created, timing ? kEventDefault : kEventDisableTiming));
      *event = HandleFromEvent(created, /*reusable=*/!timing);
    }
  }
  OPENREG_CHECK(
      EventRecord(EventFromHandle(*event), static_cast<StreamId>(stream.id())));
}

void DeviceGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) return;
  OPENREG_CHECK(StreamWaitEvent(static_cast<StreamId>(stream.id()),
                                EventFromHandle(event)));
}

bool DeviceGuardImpl::queryEvent(void* event) const {
  if (event == nullptr) return true;
  const Error error = EventQuery(EventFromHandle(event));
  // kNotReady is an answer, never recorded as the last error (as CUDA).
  if (error == Error::kNotReady) {
    return false;
  }
  OPENREG_CHECK(error);
  return true;
}

void DeviceGuardImpl::synchronizeEvent(void* event) const {
  if (event == nullptr) return;
  OPENREG_CHECK(EventSynchronize(EventFromHandle(event)));
  RaisePendingKernelWarnings();
}

double DeviceGuardImpl::elapsedTime(
    void* start_event, void* end_event,
    const c10::DeviceIndex /*device_index*/) const {
  TORCH_CHECK(start_event != nullptr && end_event != nullptr,
              "openreg: both events must be recorded before elapsed_time()");
  float milliseconds = 0;
  OPENREG_CHECK(EventElapsedTime(&milliseconds, EventFromHandle(start_event),
                                 EventFromHandle(end_event)));
  return milliseconds;
}

bool DeviceGuardImpl::queryStream(const c10::Stream& stream) const {
  const Error error = StreamQuery(static_cast<StreamId>(stream.id()));
  if (error == Error::kNotReady) {  // an answer, not a recorded error
    return false;
  }
  OPENREG_CHECK(error);
  return true;
}

void DeviceGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  // As CUDA's CUDAStream::synchronize (stream_synchronize) does; device
  // and event synchronization do not count there either.
  WarnOrErrorOnSync("Stream.synchronize()");
  OPENREG_CHECK(StreamSynchronize(static_cast<StreamId>(stream.id())));
  RaisePendingKernelWarnings();
}

void DeviceGuardImpl::synchronizeDevice(
    const c10::DeviceIndex device_index) const {
  c10::DeviceGuard guard(c10::Device(kType, ResolveDevice(device_index)));
  OPENREG_CHECK(DeviceSynchronize());
  RaisePendingKernelWarnings();
}

void DeviceGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                            const c10::Stream& stream) const {
  // The caching allocator reuses blocks per stream: a block used on another
  // stream must not be reused before that stream passes the free point.
  GetDeviceAllocator().recordStream(data_ptr, stream);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl);

}  // namespace openreg::torch_backend
