#include "device_daemon/sessions/import_table.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

}  // namespace

absl::StatusOr<std::pair<std::shared_ptr<DeviceBuffer>, uint64_t>>
ImportTable::ExportableRange(const AllocationTable& allocations,
                             uint64_t address) {
  const AllocationTable::Entry* entry = allocations.FindContaining(address);
  if (entry == nullptr) {
    absl::Status why = allocations.DescribeBadPointer(address);
    return InvalidValueError(absl::StrCat("cannot export: ", why.message()));
  }
  if (entry->imported) {
    return InvalidValueError(absl::StrCat(
        "cannot export ", Hex(address),
        ": it was opened from an IPC handle; share that handle instead"));
  }
  return std::make_pair(entry->buffer, address - entry->buffer->address());
}

absl::StatusOr<uint64_t> ImportTable::Open(AllocationTable& allocations,
                                           std::shared_ptr<DeviceBuffer> buffer,
                                           uint64_t offset) {
  const uint64_t base = buffer->address();
  const AllocationTable::Entry* entry = allocations.FindStartingAt(base);
  if (entry != nullptr && !entry->imported) {
    return InvalidValueError(absl::StrCat(
        "this process exported the memory at ", Hex(base),
        " itself: use its own pointer instead of opening the handle"));
  }
  if (entry == nullptr) {
    imported_bytes_ += buffer->size();
    allocations.AddImported(std::move(buffer));
  }
  ++opens_by_buffer_[base];
  const uint64_t address = base + offset;
  auto& [imported_base, opens] = opens_by_address_[address];
  imported_base = base;
  ++opens;
  return address;
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> ImportTable::Close(
    AllocationTable& allocations, uint64_t address) {
  auto import = opens_by_address_.find(address);
  if (import == opens_by_address_.end()) {
    return InvalidValueError(absl::StrCat(
        Hex(address),
        " was not opened from an IPC handle in this process (or is "
        "already closed)"));
  }
  const uint64_t base = import->second.first;
  if (--import->second.second == 0) opens_by_address_.erase(import);
  std::shared_ptr<DeviceBuffer> released;
  auto buffer_opens = opens_by_buffer_.find(base);
  if (buffer_opens != opens_by_buffer_.end() && --buffer_opens->second == 0) {
    opens_by_buffer_.erase(buffer_opens);
    released = allocations.RemoveImported(base);
    imported_bytes_ -= released->size();
  }
  return released;
}

uint64_t ImportTable::CountOpens(uint64_t begin, uint64_t end) const {
  uint64_t opens = 0;
  for (auto it = opens_by_address_.lower_bound(begin);
       it != opens_by_address_.end() && it->first < end; ++it) {
    opens += it->second.second;
  }
  return opens;
}

}  // namespace openreg::daemon
