#include "torch_backend/host_allocator.h"

#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "openreg/runtime.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

// Events are created by an RPC; the allocator needs one per (block, stream)
// use, so finished ones are kept for reuse, per device.
class EventPool {
 public:
  static EventPool& Get() {
    static EventPool* pool = new EventPool();
    return *pool;
  }

  // nullopt when no event can be created (a lost daemon).
  std::optional<EventId> Acquire(c10::DeviceIndex device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (static_cast<size_t>(device) < free_.size() &&
          !free_[device].empty()) {
        const EventId event = free_[device].back();
        free_[device].pop_back();
        return event;
      }
    }
    int previous = 0;
    if (GetDevice(&previous) != Error::kSuccess) return std::nullopt;
    EventId event = 0;
    const bool created =
        SetDevice(device) == Error::kSuccess &&
        EventCreate(&event, kEventDisableTiming) == Error::kSuccess;
    SetDevice(previous);
    if (!created) return std::nullopt;
    return event;
  }

  void Release(c10::DeviceIndex device, EventId event) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<size_t>(device) >= free_.size()) free_.resize(device + 1);
    free_[device].push_back(event);
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<EventId>> free_;
};

// An event recorded after a pinned block's use on one stream (the E of
// CachingHostAllocatorImpl). Move-only; returns its id to the pool.
class UseEvent {
 public:
  UseEvent(c10::DeviceIndex device, EventId id) : device_(device), id_(id) {}
  UseEvent(UseEvent&& other) noexcept
      : device_(other.device_), id_(std::exchange(other.id_, kNone)) {}
  UseEvent& operator=(UseEvent&& other) noexcept {
    if (this != &other) {
      Reset();
      device_ = other.device_;
      id_ = std::exchange(other.id_, kNone);
    }
    return *this;
  }
  UseEvent(const UseEvent&) = delete;
  UseEvent& operator=(const UseEvent&) = delete;
  ~UseEvent() { Reset(); }

  // Done, or never going to run (a lost daemon): either way the block may
  // be reused.
  bool Finished() const {
    const Error error = EventQuery(id_);
    IgnoreError(error, "both answers are the query's: done or never runs");
    return error != Error::kNotReady;
  }

 private:
  static constexpr EventId kNone = ~EventId{0};
  void Reset() {
    if (id_ != kNone) EventPool::Get().Release(device_, id_);
    id_ = kNone;
  }

  c10::DeviceIndex device_;
  EventId id_;
};

class HostAllocatorImpl
    : public at::CachingHostAllocatorImpl<c10::Stream, UseEvent> {
 public:
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    OPENREG_CHECK(HostAlloc(ptr, size));
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    // Called from empty_cache(), which must not throw.
    IgnoreError(HostFree(block->ptr_),
                "the daemon is gone: no queued copy uses the block any more");
  }

  // Runs while a block is freed (often in a destructor), so it never
  // throws: when the event cannot be recorded the daemon is gone and the
  // queued copies will never run, so the block needs no event.
  void record_stream(std::optional<std::vector<UseEvent>>& events,
                     c10::Stream stream) override {
    const c10::DeviceIndex device = stream.device_index();
    const std::optional<EventId> id = EventPool::Get().Acquire(device);
    if (!id.has_value()) return;
    UseEvent recorded(device, *id);
    if (const Error error =
            EventRecord(*id, static_cast<StreamId>(stream.id()));
        error != Error::kSuccess) {
      IgnoreError(error, "the daemon is gone: the queued copies never run");
      return;
    }
    events->push_back(std::move(recorded));
  }

  bool query_event(UseEvent& event) override { return event.Finished(); }

  c10::Stream get_current_stream() const override {
    int device = 0;
    OPENREG_CHECK(GetDevice(&device));
    return CurrentStream(static_cast<c10::DeviceIndex>(device));
  }

  bool stream_is_capturing(c10::Stream) const override { return false; }
};

void DeletePinned(void* context);

struct HostAllocator final
    : public at::CachingHostAllocatorInterface<HostAllocatorImpl,
                                               DeletePinned> {};

// Never destroyed: pinned tensors may be freed during interpreter exit.
HostAllocator& Instance() {
  static HostAllocator* allocator = new HostAllocator();
  return *allocator;
}

void DeletePinned(void* context) { Instance().free(context); }

}  // namespace

at::HostAllocator& GetHostAllocator() { return Instance(); }

bool IsPinnedRange(const void* data, size_t bytes) {
  if (data == nullptr) return false;
  HostRegionInfo info;
  if (!IsHostAllocated(data)) return false;
  if (IgnoreError(HostGetRegion(data, &info),
                  "a region of an earlier session is not pinned for this "
                  "one") != Error::kSuccess) {
    return false;
  }
  return info.offset + bytes <= info.size;
}

void RecordPinnedUse(const at::Tensor& tensor, const c10::Stream& stream) {
  const c10::DataPtr& data = tensor.storage().data_ptr();
  Instance().record_event(data.get(), data.get_context(), stream);
}

REGISTER_HOST_ALLOCATOR(c10::kPrivateUse1, &Instance())

}  // namespace openreg::torch_backend
