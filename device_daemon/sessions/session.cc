#include "device_daemon/sessions/session.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/memory/host_region.h"

namespace openreg::daemon {
namespace {

// How long DestroyStream waits for a stream's last commands before it
// returns and lets the stream finish on its own.
constexpr absl::Duration kDestroyWait = absl::Seconds(1);

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

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
  absl::StatusOr<SessionSegment> segment = SessionSegment::Create(
      limits, static_cast<uint32_t>(devices->count()), identity.id);
  if (!segment.ok()) return segment.status();
  absl::StatusOr<SessionRing> ring = SessionRing::Create(devices);
  if (!ring.ok()) return ring.status();
  std::unique_ptr<Session> session(new Session(std::move(identity), devices,
                                               engine, *std::move(segment),
                                               *std::move(ring)));
  {
    absl::MutexLock lock(&session->mutex_);
    for (int device = 0; device < devices->count(); ++device) {
      session->ActivateStream(static_cast<uint32_t>(device), device, 0);
    }
  }
  return session;
}

Session::Session(SessionIdentity identity, Devices* devices,
                 StreamEngine* engine, SessionSegment segment, SessionRing ring)
    : identity_(std::move(identity)),
      devices_(devices),
      engine_(engine),
      segment_(std::move(segment)),
      ring_(std::move(ring)),
      allocations_(devices),
      events_(segment_.event_slot(0), segment_.layout().limits.max_events) {
  absl::MutexLock lock(&mutex_);
  stream_generations_.assign(segment_.layout().limits.max_streams, 0);
}

Session::~Session() { Close(); }

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
      segment_.header(), static_cast<uint32_t>(ErrorCodeOf(error)),
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
  return allocations_.Buffers();
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
  absl::MutexLock lock(&mutex_);
  // Closed meanwhile: `buffer` goes out of scope and frees the memory.
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return allocations_.Add(*std::move(buffer));
}

absl::Status Session::Free(uint64_t address) {
  // Dropped after the lock: the memory returns to its arena.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> released;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  released = allocations_.Remove(address);
  memory_generation_.fetch_add(1, std::memory_order_acq_rel);
  return released.status();
}

absl::Status Session::ValidateRange(uint64_t address, uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return allocations_.PinRange(address, bytes).status();
}

absl::StatusOr<PinnedRange> Session::PinRange(uint64_t address,
                                              uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return allocations_.PinRange(address, bytes);
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
  return allocations_.allocated_bytes();
}

// ---- IPC memory --------------------------------------------------------

absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>>
Session::ExportableRange(uint64_t address) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return ImportTable::ExportableRange(allocations_, address);
}

absl::StatusOr<uint64_t> Session::OpenImported(
    std::shared_ptr<DeviceBuffer> buffer, uint64_t offset) {
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return imports_.Open(allocations_, std::move(buffer), offset);
}

absl::Status Session::CloseImported(uint64_t address) {
  // Dropped after the lock, when this was the buffer's last open.
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> released;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  released = imports_.Close(allocations_, address);
  memory_generation_.fetch_add(1, std::memory_order_acq_rel);
  return released.status();
}

uint64_t Session::CountOpenImports(uint64_t begin, uint64_t end) const {
  absl::ReaderMutexLock lock(&mutex_);
  return imports_.CountOpens(begin, end);
}

uint64_t Session::imported_bytes() const {
  absl::ReaderMutexLock lock(&mutex_);
  return imports_.imported_bytes();
}

// ---- Streams -----------------------------------------------------------

void Session::TaintStream(uint32_t slot, uint64_t sequence,
                          uint64_t communicator, const absl::Status& why) {
  taints_.Taint(slot, sequence, communicator, why);
  uint64_t none = 0;
  // Before the stream's completion counter passes `sequence` (the caller
  // runs that command): a client that sees the work done sees the taint.
  stream_slot(slot)->tainted_at.compare_exchange_strong(
      none, sequence, std::memory_order_release);
}

void Session::ClearTaints(uint64_t communicator) {
  for (uint32_t slot : taints_.Clear(communicator)) {
    stream_slot(slot)->tainted_at.store(0, std::memory_order_release);
  }
}

void Session::ActivateStream(uint32_t slot, int device, int priority) {
  segment_.ResetStreamSlot(slot);
  taints_.ClearSlot(slot);
  StreamSlot* shared = stream_slot(slot);
  shared->device = device;
  shared->priority = priority;
  shared->state.store(static_cast<uint32_t>(StreamState::kActive),
                      std::memory_order_release);
  ++stream_generations_[slot];
  StreamEntry& entry = streams_[slot];
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
  ReapDestroyedStreamsLocked();
  for (uint32_t slot = layout().device_count;
       slot < layout().limits.max_streams; ++slot) {
    if (streams_.count(slot) == 0) {
      ActivateStream(slot, device, priority);
      return slot;
    }
  }
  return MakeError(
      proto::RESOURCE_EXHAUSTED,
      absl::StrCat("all ", layout().limits.max_streams - layout().device_count,
                   " non-default stream slots are in use"));
}

absl::Status Session::DestroyStream(uint32_t slot) {
  std::shared_ptr<RunningStream> worker;
  {
    absl::MutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    if (slot < layout().device_count) {
      return InvalidValueError(absl::StrCat("stream ", slot,
                                            " is the default stream of device ",
                                            slot, " and cannot be destroyed"));
    }
    auto entry = streams_.find(slot);
    if (entry == streams_.end() || entry->second.destroying) {
      return InvalidHandleError(
          absl::StrCat("stream ", slot, " does not exist"));
    }
    entry->second.destroying = true;
    worker = entry->second.worker;
  }
  // Outside the lock: the worker may need the session to finish its
  // commands. As cudaStreamDestroy does, a stream with work left (a wait
  // for another stream's later work, say) returns at once and frees its
  // slot when that work is done (ReapDestroyedStreamsLocked); a client
  // that never waited for it cannot hold this call.
  if (worker != nullptr) {
    worker->RequestDrainAndStop();
    if (!worker->JoinFor(kDestroyWait)) return absl::OkStatus();
  }
  absl::MutexLock lock(&mutex_);
  if (closed_) return absl::OkStatus();  // Close() cleaned up meanwhile
  FreeStreamSlotLocked(slot);
  return absl::OkStatus();
}

void Session::FreeStreamSlotLocked(uint32_t slot) {
  streams_.erase(slot);
  stream_slot(slot)->state.store(static_cast<uint32_t>(StreamState::kFree),
                                 std::memory_order_release);
}

void Session::ReapDestroyedStreamsLocked() {
  std::vector<uint32_t> done;
  for (const auto& [slot, entry] : streams_) {
    if (entry.destroying &&
        (entry.worker == nullptr || entry.worker->finished())) {
      done.push_back(slot);
    }
  }
  for (uint32_t slot : done) FreeStreamSlotLocked(slot);
}

bool Session::IsStreamAlive(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (closed_) return false;
  auto entry = streams_.find(slot);
  if (entry == streams_.end()) return false;
  return entry->second.worker == nullptr || !entry->second.worker->finished();
}

uint64_t Session::StreamGeneration(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  return slot < stream_generations_.size() ? stream_generations_[slot] : 0;
}

// ---- Events ------------------------------------------------------------

absl::StatusOr<uint32_t> Session::CreateEvent(int device, bool enable_timing,
                                              bool interprocess) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  if (absl::Status flags = EventTable::CheckFlags(enable_timing, interprocess);
      !flags.ok()) {
    return flags;
  }
  EventTable::Entry entry;
  entry.device = device;
  entry.enable_timing = enable_timing;
  entry.interprocess = interprocess;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return events_.Add(std::move(entry));
}

absl::Status Session::DestroyEvent(uint32_t slot) {
  // Dropped after the lock: an imported event holds its exporter.
  absl::StatusOr<std::shared_ptr<const IpcEventSource>> source;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  source = events_.Remove(slot);
  return source.status();
}

bool Session::IsEventLive(uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  return !closed_ && events_.IsLive(slot);
}

// ---- Interprocess events -------------------------------------------------

absl::StatusOr<ExportableEvent> Session::ExportableEventAt(
    uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return events_.ExportableAt(slot);
}

bool Session::HoldsEvent(uint32_t slot, uint64_t serial) const {
  absl::ReaderMutexLock lock(&mutex_);
  return events_.Holds(slot, serial);
}

absl::StatusOr<uint32_t> Session::OpenImportedEvent(IpcEventSource source,
                                                    int device) {
  if (absl::Status valid = CheckDevice(device); !valid.ok()) return valid;
  EventTable::Entry entry;
  entry.device = device;
  entry.imported = std::make_shared<const IpcEventSource>(std::move(source));
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return events_.Add(std::move(entry));
}

absl::StatusOr<IpcEventSource> Session::ImportedEventSource(
    uint32_t slot) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return events_.ImportedSource(slot);
}

// ---- Pinned host regions -----------------------------------------------

absl::StatusOr<uint32_t> Session::RegisterHostRegion(int client_fd,
                                                     uint64_t size) {
  {
    absl::ReaderMutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    if (absl::Status room = host_regions_.CheckRoom(); !room.ok()) return room;
  }
  // Opened and mapped outside the lock: mmap of a large region is slow.
  absl::StatusOr<std::shared_ptr<HostRegion>> region =
      HostRegion::Open(identity_.peer.pid, client_fd, size, identity_.peer.uid);
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return host_regions_.Add(*std::move(region));
}

absl::Status Session::UnregisterHostRegion(uint32_t region) {
  // Dropped after the lock: the last reference unmaps the region.
  absl::StatusOr<std::shared_ptr<HostRegion>> released;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  released = host_regions_.Remove(region);
  return released.status();
}

absl::StatusOr<PinnedHostRange> Session::PinHostRange(uint32_t region,
                                                      uint64_t offset,
                                                      uint64_t bytes) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return host_regions_.PinRange(region, offset, bytes);
}

size_t Session::host_region_count() const {
  absl::ReaderMutexLock lock(&mutex_);
  return host_regions_.size();
}

// ---- Lifetime ----------------------------------------------------------

// ---- Compiled modules ----------------------------------------------------

absl::StatusOr<uint64_t> Session::LoadModule(int client_fd,
                                             const std::string& name) {
  {
    absl::ReaderMutexLock lock(&mutex_);
    if (absl::Status open = CheckOpen(); !open.ok()) return open;
    if (absl::Status room = modules_.CheckRoom(); !room.ok()) return room;
  }
  // Loaded outside the lock: dlopen runs the module's initializers.
  absl::StatusOr<std::shared_ptr<LoadedModule>> module = LoadedModule::Open(
      identity_.peer.pid, client_fd, identity_.peer.uid, name);
  if (!module.ok()) return module.status();
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return modules_.Add(*std::move(module));
}

absl::Status Session::UnloadModule(uint64_t module) {
  // Dropped after the lock: the last reference unloads the library.
  absl::StatusOr<std::shared_ptr<LoadedModule>> released;
  absl::MutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  released = modules_.Remove(module);
  return released.status();
}

absl::StatusOr<std::shared_ptr<LoadedModule>> Session::FindModule(
    uint64_t module) const {
  absl::ReaderMutexLock lock(&mutex_);
  if (absl::Status open = CheckOpen(); !open.ok()) return open;
  return modules_.Find(module);
}

size_t Session::module_count() const {
  absl::ReaderMutexLock lock(&mutex_);
  return modules_.size();
}

void Session::Close() {
  std::vector<std::shared_ptr<RunningStream>> workers;
  // Everything the session held, taken out of its tables under the lock.
  // Device memory and imports go back as soon as the streams were asked to
  // stop: a command still running holds its own pins (PinnedRange), and no
  // later command finds them in the emptied tables, so a dead client's
  // memory (and what it imported, docs/ARCHITECTURE.md "Sharing device
  // memory") comes back at its hang-up, not after its last kernel. The
  // rest goes once the streams stopped.
  auto released_memory = std::make_unique<AllocationTable>(devices_);
  auto released_imports = std::make_unique<ImportTable>();
  HostRegionTable released_host_regions;
  ModuleTable released_modules;
  std::map<uint32_t, EventTable::Entry> released_events;
  std::map<uint32_t, StreamEntry> released_streams;
  {
    absl::MutexLock lock(&mutex_);
    if (closed_) return;
    closed_ = true;
    memory_generation_.fetch_add(1, std::memory_order_acq_rel);
    for (auto& [slot, entry] : streams_) {
      if (entry.worker != nullptr) workers.push_back(entry.worker);
    }
    released_events = events_.Close();
    std::swap(*released_memory, allocations_);
    std::swap(*released_imports, imports_);
    std::swap(released_host_regions, host_regions_);
    std::swap(released_modules, modules_);
    std::swap(released_streams, streams_);
  }
  // Ask every worker first so that they wind down in parallel.
  for (auto& worker : workers) worker->RequestStop();
  // The allocation table holds the imported buffers too (import_table.h):
  // each block goes back to its arena when its last reference goes.
  released_imports.reset();
  released_memory.reset();
  for (auto& worker : workers) worker->Join();
  streams_stopped_.store(true, std::memory_order_release);
  if (engine_ != nullptr) engine_->SessionClosed(identity_.id);
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
  stats.allocated_bytes = allocations_.allocated_bytes();
  stats.imported_bytes = imports_.imported_bytes();
  stats.modules = static_cast<uint32_t>(modules_.size());
  stats.streams = static_cast<uint32_t>(streams_.size());
  stats.commands_executed = commands_executed_.load(std::memory_order_relaxed);
  for (const auto& [device, bytes] : allocations_.allocated_bytes_by_device()) {
    stats.devices[device].allocated_bytes = bytes;
  }
  for (const auto& [slot, stream] : streams_) {
    ++stats.devices[stream.device].streams;
  }
  return stats;
}

}  // namespace openreg::daemon
