#include "device_daemon/ipc/ipc_exports.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

uint64_t RandomWord() {
  // std::random_device reads the kernel's CSPRNG (getrandom) on Linux.
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

// Compares secrets in time independent of where they differ.
bool SameSecret(const std::array<uint8_t, 16>& a,
                const std::array<uint8_t, 16>& b) {
  uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= a[i] ^ b[i];
  return difference == 0;
}

absl::Status UnknownHandle(absl::string_view why) {
  return MakeError(proto::INVALID_HANDLE,
                   absl::StrCat("cannot open the IPC handle: ", why));
}

std::array<uint8_t, 16> RandomSecret() {
  std::array<uint8_t, 16> secret{};
  for (size_t i = 0; i < secret.size(); i += 8) {
    const uint64_t word = RandomWord();
    for (size_t j = 0; j < 8; ++j) {
      secret[i + j] = static_cast<uint8_t>(word >> (8 * j));
    }
  }
  return secret;
}

absl::Status OtherUser(uid_t exporter_uid) {
  return MakeError(
      proto::PERMISSION_DENIED,
      absl::StrCat("cannot open the IPC handle: it was exported by uid ",
                   exporter_uid,
                   ", and only processes of that uid may open it"));
}

}  // namespace

IpcExports::IpcExports() : instance_(RandomWord()) {}

void IpcExports::Prune() {
  for (auto it = exports_.begin(); it != exports_.end();) {
    if (it->second.buffer.expired()) {
      it = exports_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = by_buffer_.begin(); it != by_buffer_.end();) {
    if (exports_.count(it->second) == 0) {
      it = by_buffer_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = event_exports_.begin(); it != event_exports_.end();) {
    std::shared_ptr<const Session> exporter = it->second.exporter.lock();
    if (exporter == nullptr || exporter->closed() ||
        !exporter->HoldsEvent(it->second.event_slot, it->second.serial)) {
      it = event_exports_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<IpcHandle> IpcExports::DecodeOwnHandle(
    absl::string_view bytes, IpcHandleKind kind) const {
  absl::StatusOr<IpcHandle> handle = DecodeIpcHandle(bytes, kind);
  if (!handle.ok()) return handle.status();
  if (handle->daemon_instance != instance_) {
    return UnknownHandle(
        "it was made by another openreg daemon (or an earlier run of this "
        "one); handles are valid only on the daemon that made them");
  }
  return handle;
}

absl::StatusOr<std::string> IpcExports::ExportMemory(const Session& exporter,
                                                     uint64_t address) {
  absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>> range =
      exporter.ExportableRange(address);
  if (!range.ok()) return range.status();
  const std::shared_ptr<DeviceBuffer>& buffer = range->first;
  IpcHandle handle;
  handle.kind = IpcHandleKind::kMemory;
  handle.daemon_instance = instance_;
  handle.offset = range->second;
  absl::MutexLock lock(&mutex_);
  Prune();
  auto existing = by_buffer_.find(buffer.get());
  if (existing != by_buffer_.end() &&
      exports_.at(existing->second).buffer.lock() == buffer) {
    handle.export_id = existing->second;
    handle.secret = exports_.at(existing->second).secret;
    return EncodeIpcHandle(handle);
  }
  Export entry;
  entry.buffer = buffer;
  entry.secret = RandomSecret();
  entry.uid = exporter.uid();
  entry.exporter_session = exporter.id();
  entry.exporter_pid = exporter.pid();
  entry.bytes = buffer->size();
  entry.device = buffer->device();
  handle.export_id = next_export_++;
  handle.secret = entry.secret;
  exports_[handle.export_id] = entry;
  by_buffer_[buffer.get()] = handle.export_id;
  return EncodeIpcHandle(handle);
}

absl::StatusOr<OpenedMemory> IpcExports::OpenMemory(Session& importer,
                                                    absl::string_view bytes) {
  absl::StatusOr<IpcHandle> handle =
      DecodeOwnHandle(bytes, IpcHandleKind::kMemory);
  if (!handle.ok()) return handle.status();
  std::shared_ptr<DeviceBuffer> buffer;
  {
    absl::MutexLock lock(&mutex_);
    auto found = exports_.find(handle->export_id);
    if (found == exports_.end() ||
        !SameSecret(found->second.secret, handle->secret)) {
      return UnknownHandle("no such export (a forged or corrupted handle)");
    }
    if (found->second.uid != importer.uid()) {
      return OtherUser(found->second.uid);
    }
    buffer = found->second.buffer.lock();
    if (buffer == nullptr) {
      exports_.erase(found);
      return UnknownHandle(
          "the exported memory was freed by its exporter and closed by "
          "every importer");
    }
  }
  if (handle->offset >= std::max<uint64_t>(buffer->size(), 1)) {
    return UnknownHandle("its offset lies outside the exported allocation");
  }
  OpenedMemory opened;
  opened.size = buffer->size() - handle->offset;
  opened.device = buffer->device();
  absl::StatusOr<uint64_t> address =
      importer.OpenImported(std::move(buffer), handle->offset);
  if (!address.ok()) return address.status();
  opened.address = *address;
  return opened;
}

absl::StatusOr<std::string> IpcExports::ExportEvent(
    const std::shared_ptr<const Session>& exporter, uint32_t event_slot) {
  absl::StatusOr<ExportableEvent> event =
      exporter->ExportableEventAt(event_slot);
  if (!event.ok()) return event.status();
  IpcHandle handle;
  handle.kind = IpcHandleKind::kEvent;
  handle.daemon_instance = instance_;
  absl::MutexLock lock(&mutex_);
  Prune();
  for (const auto& [id, entry] : event_exports_) {
    if (entry.exporter.lock() == exporter && entry.event_slot == event_slot &&
        entry.serial == event->serial) {
      handle.export_id = id;
      handle.secret = entry.secret;
      return EncodeIpcHandle(handle);
    }
  }
  EventExport entry;
  entry.exporter = exporter;
  entry.event_slot = event_slot;
  entry.serial = event->serial;
  entry.secret = RandomSecret();
  entry.uid = exporter->uid();
  entry.device = event->device;
  handle.export_id = next_export_++;
  handle.secret = entry.secret;
  event_exports_[handle.export_id] = entry;
  return EncodeIpcHandle(handle);
}

absl::StatusOr<OpenedEvent> IpcExports::OpenEvent(Session& importer,
                                                  absl::string_view bytes) {
  absl::StatusOr<IpcHandle> handle =
      DecodeOwnHandle(bytes, IpcHandleKind::kEvent);
  if (!handle.ok()) return handle.status();
  IpcEventSource source;
  int device = 0;
  {
    absl::MutexLock lock(&mutex_);
    Prune();
    auto found = event_exports_.find(handle->export_id);
    if (found == event_exports_.end() ||
        !SameSecret(found->second.secret, handle->secret)) {
      // Pruned exports are indistinguishable from forged ones here; say
      // both.
      return UnknownHandle(
          "no such event export (a forged or corrupted handle, or the "
          "exporter destroyed the event or ended)");
    }
    if (found->second.uid != importer.uid()) {
      return OtherUser(found->second.uid);
    }
    source.exporter = found->second.exporter.lock();
    source.event_slot = found->second.event_slot;
    source.serial = found->second.serial;
    device = found->second.device;
  }
  if (source.exporter.get() == &importer) {
    return InvalidValueError(
        "cannot open the IPC handle: this process exported the event; use "
        "the event itself");
  }
  OpenedEvent opened;
  opened.device = device;
  absl::StatusOr<uint32_t> slot =
      importer.OpenImportedEvent(std::move(source), device);
  if (!slot.ok()) return slot.status();
  opened.event_slot = *slot;
  return opened;
}

std::vector<ExportStats> IpcExports::Stats() const {
  absl::MutexLock lock(&mutex_);
  std::vector<ExportStats> stats;
  for (const auto& [id, entry] : exports_) {
    if (entry.buffer.expired()) continue;
    ExportStats& export_stats = stats.emplace_back();
    export_stats.export_id = id;
    export_stats.exporter_pid = entry.exporter_pid;
    export_stats.device = entry.device;
    export_stats.bytes = entry.bytes;
  }
  return stats;
}

}  // namespace openreg::daemon
