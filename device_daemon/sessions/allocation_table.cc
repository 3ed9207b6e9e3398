#include "device_daemon/sessions/allocation_table.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data_plane/device_address.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

// How many freed addresses a session remembers for double-free messages.
constexpr size_t kRecentlyFreedLimit = 4096;

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

}  // namespace

uint64_t AllocationTable::Add(std::shared_ptr<DeviceBuffer> buffer) {
  const uint64_t address = buffer->address();
  const uint64_t size = buffer->size();
  allocated_bytes_by_device_[buffer->device()] += size;
  entries_[address] = Entry{std::move(buffer)};
  allocated_bytes_ += size;
  // A reused address is no longer "already freed". Its stale entry in the
  // order deque only makes a later eviction slightly early.
  recently_freed_.erase(address);
  return address;
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> AllocationTable::Remove(
    uint64_t address) {
  auto entry = entries_.find(address);
  if (entry == entries_.end()) {
    return DescribeBadPointer(address);
  }
  if (entry->second.imported) {
    return InvalidValueError(
        absl::StrCat(Hex(address),
                     " was opened from an IPC handle: close it with "
                     "IpcCloseMemHandle instead of freeing it"));
  }
  std::shared_ptr<DeviceBuffer> released = std::move(entry->second.buffer);
  allocated_bytes_ -= released->size();
  auto on_device = allocated_bytes_by_device_.find(released->device());
  on_device->second -= released->size();
  if (on_device->second == 0) allocated_bytes_by_device_.erase(on_device);
  entries_.erase(entry);
  RememberFreed(address);
  return released;
}

std::vector<std::shared_ptr<DeviceBuffer>> AllocationTable::Buffers() const {
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  buffers.reserve(entries_.size());
  for (const auto& [address, entry] : entries_) {
    buffers.push_back(entry.buffer);
  }
  return buffers;
}

void AllocationTable::RememberFreed(uint64_t address) {
  if (recently_freed_.insert(address).second) {
    recently_freed_order_.push_back(address);
  }
  while (recently_freed_order_.size() > kRecentlyFreedLimit) {
    recently_freed_.erase(recently_freed_order_.front());
    recently_freed_order_.pop_front();
  }
}

const AllocationTable::Entry* AllocationTable::FindContaining(
    uint64_t address) const {
  auto after = entries_.upper_bound(address);
  if (after == entries_.begin()) return nullptr;
  const auto& [base, entry] = *std::prev(after);
  const uint64_t end = base + std::max<uint64_t>(entry.buffer->size(), 1);
  return address < end ? &entry : nullptr;
}

absl::Status AllocationTable::DescribeBadPointer(uint64_t address) const {
  if (!IsDeviceAddress(address)) {
    return InvalidValueError(
        absl::StrCat(Hex(address), " is not a device address"));
  }
  if (const Entry* entry = FindContaining(address)) {
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

absl::StatusOr<PinnedRange> AllocationTable::PinRange(uint64_t address,
                                                      uint64_t bytes) const {
  if (bytes == 0) return PinnedRange{};
  const Entry* entry = FindContaining(address);
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

// ---- Imported entries --------------------------------------------------

const AllocationTable::Entry* AllocationTable::FindStartingAt(
    uint64_t base) const {
  auto entry = entries_.find(base);
  return entry == entries_.end() ? nullptr : &entry->second;
}

void AllocationTable::AddImported(std::shared_ptr<DeviceBuffer> buffer) {
  const uint64_t base = buffer->address();
  entries_.emplace(base, Entry{std::move(buffer), true});
}

std::shared_ptr<DeviceBuffer> AllocationTable::RemoveImported(uint64_t base) {
  auto entry = entries_.find(base);
  if (entry == entries_.end()) return nullptr;
  std::shared_ptr<DeviceBuffer> released = std::move(entry->second.buffer);
  entries_.erase(entry);
  return released;
}

}  // namespace openreg::daemon
