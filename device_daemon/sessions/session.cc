#include "device_daemon/sessions/session.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

// How many freed addresses a session remembers for double-free messages.
constexpr size_t kRecentlyFreedLimit = 4096;

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

void ResetStreamSlot(StreamSlot* slot) {
  slot->ring.tail.value.store(0, std::memory_order_relaxed);
  slot->ring.head.value.store(0, std::memory_order_relaxed);
  slot->completed.value.store(0, std::memory_order_relaxed);
  slot->error_code.store(0, std::memory_order_relaxed);
  slot->error_sequence = 0;
  std::memset(slot->error_op, 0, sizeof(slot->error_op));
  std::memset(slot->error_message, 0, sizeof(slot->error_message));
  slot->reply_sequence = 0;
  slot->reply_size = 0;
  slot->warnings.state.store(WarningMailbox::kEmpty, std::memory_order_relaxed);
  slot->parked.store(0, std::memory_order_relaxed);
  slot->warnings.dropped.store(0, std::memory_order_relaxed);
  slot->warnings.bytes = 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::Create(
    SessionIdentity identity, Devices* devices, StreamEngine* engine,
    const SessionLimits& limits) {
  if (limits.max_streams < static_cast<uint32_t>(devices->count())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a session needs at least one stream slot per device (",
                     devices->count(), "), limits allow ", limits.max_streams));
  }
  // A stream slot must fit the 16 bits of an event position
  // (PackEventPosition).
  if (limits.max_streams > (1u << (64 - kEventPositionSequenceBits))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "at most ", 1u << (64 - kEventPositionSequenceBits),
        " stream slots per session, limits ask for ", limits.max_streams));
  }
  const SessionHeader layout = ComputeSessionLayout(
      limits, static_cast<uint32_t>(devices->count()), identity.id);
  absl::StatusOr<SharedMemory> segment = SharedMemory::Create(
      absl::StrCat("openreg-session-", identity.id), layout.total_bytes);
  if (!segment.ok()) return segment.status();
  std::unique_ptr<Session> session(new Session(
      std::move(identity), devices, engine, *std::move(segment), layout));
  {
    absl::MutexLock lock(&session->mutex_);
    for (int device = 0; device < devices->count(); ++device) {
      session->ActivateStream(static_cast<uint32_t>(device), device, 0);
    }
  }
  return session;
}

Session::Session(SessionIdentity identity, Devices* devices,
                 StreamEngine* engine, SharedMemory segment,
                 const SessionHeader& layout)
    : identity_(std::move(identity)),
      devices_(devices),
      engine_(engine),
      segment_(std::move(segment)),
      base_(static_cast<char*>(segment_.data())),
      layout_(layout) {
  // The segment is zero-filled; the header is the only thing to write.
  std::memcpy(base_, &layout_, sizeof(layout_));
  absl::MutexLock lock(&mutex_);
  stream_generations_.assign(layout_.limits.max_streams, 0);
}

Session::~Session() { Close(); }

StreamSlot* Session::stream_slot(uint32_t slot) const {
  return reinterpret_cast<StreamSlot*>(base_ + layout_.stream_slots_offset) +
         slot;
}

EventSlot* Session::event_slot(uint32_t slot) const {
  return reinterpret_cast<EventSlot*>(base_ + layout_.event_slots_offset) +
         slot;
}

char* Session::ring_buffer(uint32_t slot) const {
  return base_ + layout_.rings_offset + slot * layout_.limits.ring_bytes;
}

char* Session::reply_area(uint32_t slot) const {
  return base_ + layout_.replies_offset + slot * layout_.limits.reply_bytes;
}

char* Session::staging() const { return base_ + layout_.staging_offset; }

absl::Status Session::CheckOpen() const {
  if (closed_) {
    return InvalidHandleError(
        absl::StrCat("session ", identity_.id, " has ended"));
  }
  if (has_sticky_error_.load(std::memory_order_acquire)) return sticky_error_;
  return absl::OkStatus();
}

void Session::MakeSticky(const absl::Status& error) {
  absl::MutexLock lock(&mutex_);
  if (has_sticky_error_.load(std::memory_order_relaxed)) return;
  sticky_error_ = error;
  has_sticky_error_.store(true, std::memory_order_release);
  PublishStickyError(
      reinterpret_cast<SessionHeader*>(base_),
      static_cast<uint32_t>(ErrorCodeOf(error)),
      std::string_view(error.message().data(), error.message().size()));
}

absl::Status Session::StickyError() const {
  if (!has_sticky_error_.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  absl::ReaderMutexLock lock(&mutex_);
  return sticky_error_;
}

std::vector<std::shared_ptr<DeviceBuffer>> Session::Allocations() const {
  absl::ReaderMutexLock lock(&mutex_);
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  buffers.reserve(table_.allocations.size());
  for (const auto& [address, entry] : table_.allocations) {
    buffers.push_back(entry.buffer);
  }
  return buffers;
}

absl::Status Session::CheckDevice(int device) const {
  if (devices_->IsValid(device)) return absl::OkStatus();
  return InvalidDeviceError(absl::StrCat("invalid device ", device,
                                         ": the daemon has ", devices_->count(),
                                         " devices"));
}

// ---- Memory ------------------------------------------------------------

absl::StatusOr<uint64_t> Session::Allocate(int device, uint64_t size) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  {
    absl::ReaderMutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
  }
  if (engine_ != nullptr) {
    absl::Status admitted = engine_->AdmitAllocation(*this, device, size);
    if (!admitted.ok()) return admitted;
  }
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> buffer =
      DeviceBuffer::Allocate(&devices_->arena(device), size);
  if (!buffer.ok()) return buffer.status();
  const uint64_t address = (*buffer)->address();
  absl::MutexLock lock(&mutex_);
  // Closed meanwhile: `buffer` goes out of scope and frees the memory.
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  table_.allocations[address] = AllocationEntry{*std::move(buffer)};
  allocated_bytes_ += size;
  // A reused address is no longer "already freed". Its stale entry in the
  // order deque only makes a later eviction slightly early.
  recently_freed_.erase(address);
  return address;
}

absl::Status Session::Free(uint64_t address) {
  std::shared_ptr<DeviceBuffer> released;  // freed after the lock is dropped
  {
    absl::MutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    auto entry = table_.allocations.find(address);
    if (entry == table_.allocations.end()) {
      return DescribeBadPointer(address);
    }
    if (entry->second.imported) {
      return InvalidValueError(
          absl::StrCat(Hex(address),
                       " was opened from an IPC handle: close it with "
                       "IpcCloseMemHandle instead of freeing it"));
    }
    released = std::move(entry->second.buffer);
    allocated_bytes_ -= released->size();
    table_.allocations.erase(entry);
    RememberFreed(address);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>>
Session::ExportableRange(uint64_t address) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  const AllocationEntry* entry = FindContaining(address);
  if (entry == nullptr) {
    absl::Status why = DescribeBadPointer(address);
    return InvalidValueError(absl::StrCat("cannot export: ", why.message()));
  }
  if (entry->imported) {
    return InvalidValueError(absl::StrCat(
        "cannot export ", Hex(address),
        ": it was opened from an IPC handle; share that handle instead"));
  }
  return std::make_pair(entry->buffer, address - entry->buffer->address());
}

absl::StatusOr<uint64_t> Session::OpenImported(
    std::shared_ptr<DeviceBuffer> buffer, uint64_t offset) {
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  const uint64_t base = buffer->address();
  auto entry = table_.allocations.find(base);
  if (entry != table_.allocations.end() && !entry->second.imported) {
    return InvalidValueError(absl::StrCat(
        "this process exported the memory at ", Hex(base),
        " itself: use its own pointer instead of opening the handle"));
  }
  if (entry == table_.allocations.end()) {
    imported_bytes_ += buffer->size();
    entry = table_.allocations
                .emplace(base, AllocationEntry{std::move(buffer), true, 0})
                .first;
  }
  ++entry->second.opens;
  const uint64_t address = base + offset;
  auto& [imported_base, opens] = table_.imports[address];
  imported_base = base;
  ++opens;
  return address;
}

absl::Status Session::CloseImported(uint64_t address) {
  std::shared_ptr<DeviceBuffer> released;  // dropped after the lock
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto import = table_.imports.find(address);
  if (import == table_.imports.end()) {
    return InvalidValueError(absl::StrCat(
        Hex(address),
        " was not opened from an IPC handle in this process (or is "
        "already closed)"));
  }
  const uint64_t base = import->second.first;
  if (--import->second.second == 0) table_.imports.erase(import);
  auto entry = table_.allocations.find(base);
  if (entry != table_.allocations.end() && --entry->second.opens == 0) {
    released = std::move(entry->second.buffer);
    imported_bytes_ -= released->size();
    table_.allocations.erase(entry);
  }
  return absl::OkStatus();
}

uint64_t Session::CountOpenImports(uint64_t begin, uint64_t end) const {
  absl::ReaderMutexLock lock(&mutex_);
  uint64_t opens = 0;
  for (auto it = table_.imports.lower_bound(begin);
       it != table_.imports.end() && it->first < end; ++it) {
    opens += it->second.second;
  }
  return opens;
}

uint64_t Session::imported_bytes() const {
  absl::ReaderMutexLock lock(&mutex_);
  return imported_bytes_;
}

void Session::RememberFreed(uint64_t address) {
  if (recently_freed_.insert(address).second) {
    recently_freed_order_.push_back(address);
  }
  while (recently_freed_order_.size() > kRecentlyFreedLimit) {
    recently_freed_.erase(recently_freed_order_.front());
    recently_freed_order_.pop_front();
  }
}

const Session::AllocationEntry* Session::FindContaining(
    uint64_t address) const {
  auto after = table_.allocations.upper_bound(address);
  if (after == table_.allocations.begin()) return nullptr;
  const auto& [base, entry] = *std::prev(after);
  const uint64_t end = base + std::max<uint64_t>(entry.buffer->size(), 1);
  return address < end ? &entry : nullptr;
}

absl::Status Session::DescribeBadPointer(uint64_t address) const {
  if (!IsDeviceAddress(address)) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " is not a device address"));
  }
  if (const AllocationEntry* entry = FindContaining(address)) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " points inside the allocation at ",
                     Hex(entry->buffer->address()), " (", entry->buffer->size(),
                     " bytes), not to its start"));
  }
  if (recently_freed_.count(address) != 0) {
    return InvalidValueError(
        absl::StrCat("double free: ", Hex(address), " was already freed"));
  }
  const int device = DeviceOfAddress(address);
  if (devices_->IsValid(device) &&
      devices_->arena(device).IsAllocated(address)) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " belongs to another session"));
  }
  return InvalidValueError(
      absl::StrCat(Hex(address), " is not an allocation of this session"));
}

absl::StatusOr<PinnedRange> Session::PinRangeLocked(uint64_t address,
                                                    uint64_t bytes) const {
  if (bytes == 0) return PinnedRange{};
  const AllocationEntry* entry = FindContaining(address);
  if (entry == nullptr) {
    absl::Status why = DescribeBadPointer(address);
    return InvalidValueError(
        absl::StrCat("invalid device pointer: ", why.message()));
  }
  const DeviceBuffer& buffer = *entry->buffer;
  if (buffer.lost()) {
    return MakeError(
        proto::DEVICE_FAULT,
        absl::StrCat("the memory at ", Hex(buffer.address()),
                     " on openreg:", buffer.device(),
                     " was lost when the device was reset after a fault: "
                     "recreate the tensor (its contents are gone)"));
  }
  const uint64_t offset = address - buffer.address();
  if (bytes > buffer.size() - offset) {
    return InvalidValueError(
        absl::StrCat("range ", Hex(address), " + ", bytes,
                     " bytes runs past the end of its allocation at ",
                     Hex(buffer.address()), " (", buffer.size(), " bytes) by ",
                     bytes - (buffer.size() - offset), " bytes"));
  }
  return PinnedRange{entry->buffer, buffer.data() + offset};
}

absl::Status Session::ValidateRange(uint64_t address, uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return PinRangeLocked(address, bytes).status();
}

absl::StatusOr<PinnedRange> Session::PinRange(uint64_t address,
                                              uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return PinRangeLocked(address, bytes);
}

absl::StatusOr<TensorExtent> Session::ValidateTensor(
    const proto::TensorRef& tensor) const {
  TensorExtent extent;
  absl::StatusOr<PinnedRange> pinned = PinTensor(tensor, &extent);
  if (!pinned.ok()) return pinned.status();
  return extent;
}

absl::StatusOr<PinnedRange> Session::PinTensor(const proto::TensorRef& tensor,
                                               TensorExtent* extent) const {
  absl::StatusOr<TensorExtent> computed = ComputeTensorExtent(
      tensor.dtype(),
      {tensor.sizes().data(), static_cast<size_t>(tensor.sizes_size())},
      {tensor.strides().data(), static_cast<size_t>(tensor.strides_size())});
  if (!computed.ok()) return computed.status();
  if (extent != nullptr) *extent = *computed;
  if (computed->numel == 0) return PinnedRange{};
  if (!IsDeviceAddress(tensor.address()) ||
      DeviceOfAddress(tensor.address()) != tensor.device()) {
    return InvalidValueError(
        absl::StrCat("tensor address ", Hex(tensor.address()),
                     " is not on device ", tensor.device()));
  }
  return PinRange(tensor.address(), computed->span_bytes);
}

uint64_t Session::allocated_bytes() const {
  absl::ReaderMutexLock lock(&mutex_);
  return allocated_bytes_;
}

// ---- Streams -----------------------------------------------------------

void Session::ActivateStream(uint32_t slot, int device, int priority) {
  StreamSlot* shared = stream_slot(slot);
  ResetStreamSlot(shared);
  shared->device = device;
  shared->priority = priority;
  shared->state.store(static_cast<uint32_t>(StreamState::kActive),
                      std::memory_order_release);
  ++stream_generations_[slot];
  StreamEntry& entry = table_.streams[slot];
  entry.device = device;
  entry.priority = priority;
  if (engine_ != nullptr) {
    entry.worker = engine_->StartStream(this, slot, device);
  }
}

absl::StatusOr<uint32_t> Session::CreateStream(int device, int priority) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  for (uint32_t slot = layout_.device_count; slot < layout_.limits.max_streams;
       ++slot) {
    if (table_.streams.count(slot) == 0) {
      ActivateStream(slot, device, priority);
      return slot;
    }
  }
  return MakeError(
      proto::RESOURCE_EXHAUSTED,
      absl::StrCat("all ", layout_.limits.max_streams - layout_.device_count,
                   " non-default stream slots are in use"));
}

absl::Status Session::DestroyStream(uint32_t slot) {
  std::shared_ptr<RunningStream> worker;
  {
    absl::MutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    if (slot < layout_.device_count) {
      return InvalidValueError(absl::StrCat("stream ", slot,
                                            " is the default stream of device ",
                                            slot, " and cannot be destroyed"));
    }
    auto entry = table_.streams.find(slot);
    if (entry == table_.streams.end() || entry->second.destroying) {
      return InvalidHandleError(
          absl::StrCat("stream ", slot, " does not exist"));
    }
    entry->second.destroying = true;
    worker = entry->second.worker;
  }
  // Outside the lock: the worker may need the session to finish its
  // commands.
  if (worker != nullptr) {
    worker->RequestDrainAndStop();
    worker->Join();
  }
  absl::MutexLock lock(&mutex_);
  if (closed_) return absl::OkStatus();  // Close() cleaned up meanwhile
  table_.streams.erase(slot);
  stream_slot(slot)->state.store(static_cast<uint32_t>(StreamState::kFree),
                                 std::memory_order_release);
  return absl::OkStatus();
}

bool Session::IsStreamAlive(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (closed_) return false;
  auto entry = table_.streams.find(slot);
  if (entry == table_.streams.end()) return false;
  return entry->second.worker == nullptr || !entry->second.worker->finished();
}

// ---- Events ------------------------------------------------------------

absl::StatusOr<uint32_t> Session::CreateEvent(int device, bool enable_timing,
                                              bool interprocess) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  if (interprocess && enable_timing) {
    return InvalidValueError(
        "an interprocess event cannot record timestamps: create it with "
        "timing disabled (as cudaEventInterprocess requires "
        "cudaEventDisableTiming)");
  }
  EventEntry entry;
  entry.device = device;
  entry.enable_timing = enable_timing;
  entry.interprocess = interprocess;
  absl::MutexLock lock(&mutex_);
  return AddEventLocked(std::move(entry));
}

absl::StatusOr<uint32_t> Session::AddEventLocked(EventEntry entry) {
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  for (uint32_t slot = 0; slot < layout_.limits.max_events; ++slot) {
    if (table_.events.count(slot) != 0) continue;
    entry.serial = next_event_serial_++;
    table_.events[slot] = std::move(entry);
    EventSlot* shared = event_slot(slot);
    shared->stream_slot = 0;
    shared->recorded_sequence.store(0, std::memory_order_relaxed);
    shared->timestamp_ns.store(0, std::memory_order_relaxed);
    shared->enqueued_position.store(0, std::memory_order_relaxed);
    shared->in_use.store(1, std::memory_order_release);
    return slot;
  }
  return MakeError(proto::RESOURCE_EXHAUSTED,
                   absl::StrCat("all ", layout_.limits.max_events,
                                " event slots are in use"));
}

absl::Status Session::DestroyEvent(uint32_t slot) {
  std::shared_ptr<const IpcEventSource> source;  // dropped after the lock
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto entry = table_.events.find(slot);
  if (entry == table_.events.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  source = std::move(entry->second.imported);
  table_.events.erase(entry);
  event_slot(slot)->in_use.store(0, std::memory_order_release);
  return absl::OkStatus();
}

bool Session::IsEventLive(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  return !closed_ && table_.events.count(slot) != 0;
}

// ---- Interprocess events -------------------------------------------------

absl::StatusOr<ExportableEvent> Session::ExportableEventAt(
    uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto entry = table_.events.find(slot);
  if (entry == table_.events.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  if (entry->second.imported != nullptr) {
    return InvalidValueError(absl::StrCat(
        "event ", slot,
        " was opened from an IPC handle; only the process that created an "
        "event can export it"));
  }
  if (!entry->second.interprocess) {
    return InvalidValueError(absl::StrCat(
        "event ", slot,
        " was not created as an interprocess event; create it with "
        "kEventInterprocess (torch.openreg.Event(interprocess=True))"));
  }
  return ExportableEvent{entry->second.serial, entry->second.device};
}

bool Session::HoldsEvent(uint32_t slot, uint64_t serial) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (closed_) {
    auto kept = event_serials_at_close_.find(slot);
    return kept != event_serials_at_close_.end() && kept->second == serial;
  }
  auto entry = table_.events.find(slot);
  return entry != table_.events.end() && entry->second.serial == serial;
}

absl::StatusOr<uint32_t> Session::OpenImportedEvent(IpcEventSource source,
                                                    int device) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  EventEntry entry;
  entry.device = device;
  entry.imported = std::make_shared<const IpcEventSource>(std::move(source));
  absl::MutexLock lock(&mutex_);
  return AddEventLocked(std::move(entry));
}

absl::StatusOr<IpcEventSource> Session::ImportedEventSource(
    uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto entry = table_.events.find(slot);
  if (entry == table_.events.end()) {
    return InvalidHandleError(absl::StrCat("event ", slot, " does not exist"));
  }
  if (entry->second.imported == nullptr) {
    return InvalidValueError(
        absl::StrCat("event ", slot, " was not opened from an IPC handle"));
  }
  return *entry->second.imported;
}

uint64_t Session::StreamGeneration(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  return slot < stream_generations_.size() ? stream_generations_[slot] : 0;
}

// ---- Lifetime ----------------------------------------------------------

absl::StatusOr<uint32_t> Session::RegisterHostRegion(int client_fd,
                                                     uint64_t size) {
  {
    absl::ReaderMutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    if (table_.host_regions.size() >= kMaxHostRegionsPerSession) {
      return MakeError(
          proto::RESOURCE_EXHAUSTED,
          absl::StrCat("the session already has ", kMaxHostRegionsPerSession,
                       " pinned host regions; free some (HostFree)"));
    }
  }
  // Opened and mapped outside the lock: mmap of a large region is slow.
  absl::StatusOr<std::shared_ptr<HostRegion>> region =
      HostRegion::Open(identity_.peer.pid, client_fd, size, identity_.peer.uid);
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  // Ids are not reused soon, so a stale id is reported as unknown.
  uint32_t id = next_host_region_;
  while (id == 0 || table_.host_regions.count(id) != 0) ++id;
  next_host_region_ = id + 1;
  table_.host_regions.emplace(id, *std::move(region));
  return id;
}

absl::Status Session::UnregisterHostRegion(uint32_t region) {
  std::shared_ptr<HostRegion> released;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto it = table_.host_regions.find(region);
  if (it == table_.host_regions.end()) {
    return InvalidHandleError(absl::StrCat(
        "host region ", region, " is not registered in this session"));
  }
  released = std::move(it->second);
  table_.host_regions.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<PinnedHostRange> Session::PinHostRange(uint32_t region,
                                                      uint64_t offset,
                                                      uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  auto it = table_.host_regions.find(region);
  if (it == table_.host_regions.end()) {
    return InvalidHandleError(absl::StrCat(
        "host region ", region,
        " is not registered in this session (freed, or never allocated "
        "with HostAlloc)"));
  }
  const uint64_t size = it->second->size();
  if (offset > size || bytes > size - offset) {
    return InvalidValueError(absl::StrCat(
        "host range [", offset, ", ", offset, " + ", bytes,
        ") is outside host region ", region, " of ", size, " bytes"));
  }
  if (bytes == 0) return PinnedHostRange{};
  return PinnedHostRange{it->second, it->second->data() + offset};
}

size_t Session::host_region_count() const {
  absl::ReaderMutexLock lock(&mutex_);
  return table_.host_regions.size();
}

void Session::Close() {
  std::vector<std::shared_ptr<RunningStream>> workers;
  ResourceTable released;
  {
    absl::MutexLock lock(&mutex_);
    if (closed_) return;
    closed_ = true;
    for (auto& [slot, entry] : table_.streams) {
      if (entry.worker != nullptr) workers.push_back(entry.worker);
    }
    for (const auto& [slot, entry] : table_.events) {
      event_serials_at_close_[slot] = entry.serial;
    }
    std::swap(released, table_);
    allocated_bytes_ = 0;
    imported_bytes_ = 0;
  }
  // Ask every worker first so that they wind down in parallel.
  for (auto& worker : workers) worker->RequestStop();
  for (auto& worker : workers) worker->Join();
  streams_stopped_.store(true, std::memory_order_release);
  if (engine_ != nullptr) engine_->SessionClosed(identity_.id);
  // `released` now drops the last table references to the session's
  // memory; DeviceBuffer returns each block to its arena.
}

bool Session::closed() const {
  absl::ReaderMutexLock lock(&mutex_);
  return closed_;
}

SessionStatsSnapshot Session::Stats() const {
  absl::ReaderMutexLock lock(&mutex_);
  SessionStatsSnapshot stats;
  stats.id = identity_.id;
  stats.pid = identity_.peer.pid;
  stats.allocated_bytes = allocated_bytes_;
  stats.imported_bytes = imported_bytes_;
  stats.streams = static_cast<uint32_t>(table_.streams.size());
  stats.commands_executed = commands_executed_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace openreg::daemon
