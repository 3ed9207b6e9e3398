#include "device_daemon/ipc_exports.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/errors.h"

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
  for (size_t i = 0; i < entry.secret.size(); i += 8) {
    const uint64_t word = RandomWord();
    for (size_t j = 0; j < 8; ++j) {
      entry.secret[i + j] = static_cast<uint8_t>(word >> (8 * j));
    }
  }
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
      DecodeIpcHandle(bytes, IpcHandleKind::kMemory);
  if (!handle.ok()) return handle.status();
  if (handle->daemon_instance != instance_) {
    return UnknownHandle(
        "it was made by another openreg daemon (or an earlier run of this "
        "one); handles are valid only on the daemon that made them");
  }
  std::shared_ptr<DeviceBuffer> buffer;
  {
    absl::MutexLock lock(&mutex_);
    auto found = exports_.find(handle->export_id);
    if (found == exports_.end() ||
        !SameSecret(found->second.secret, handle->secret)) {
      return UnknownHandle("no such export (a forged or corrupted handle)");
    }
    if (found->second.uid != importer.uid()) {
      return MakeError(
          proto::PERMISSION_DENIED,
          absl::StrCat("cannot open the IPC handle: it was exported by uid ",
                       found->second.uid,
                       ", and only processes of that uid "
                       "may open it"));
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
