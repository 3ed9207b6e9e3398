#include "device_daemon/memory/device_buffer.h"

#include "device_daemon/base/log.h"

namespace openreg::daemon {

absl::StatusOr<std::shared_ptr<DeviceBuffer>> DeviceBuffer::Allocate(
    ArenaAllocator* arena, uint64_t size) {
  absl::StatusOr<uint64_t> address = arena->Allocate(size);
  if (!address.ok()) return address.status();
  absl::StatusOr<char*> data = arena->HostPointer(*address, size);
  if (!data.ok()) {
    arena->Free(*address).IgnoreError();
    return data.status();
  }
  return std::shared_ptr<DeviceBuffer>(
      new DeviceBuffer(arena, *address, size, *data));
}

DeviceBuffer::~DeviceBuffer() {
  absl::Status status = arena_->Free(address_);
  if (!status.ok()) {
    Log(LogLevel::kError, "releasing device memory: ", status.message());
  }
}

}  // namespace openreg::daemon
