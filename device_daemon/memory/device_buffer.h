// One block of device memory, returned to its arena when the last reference
// goes away.
//
// Reference counting is what makes frees safe against commands in flight:
// a stream worker pins every buffer a command touches (a shared_ptr copy)
// while it runs, so an immediate Free from another thread only removes the
// session's table entry and the memory itself returns to the arena when
// the command finishes. It is also the shape IPC sharing needs: several
// sessions' tables may hold the same buffer.
#ifndef OPENREG_DEVICE_DAEMON_MEMORY_DEVICE_BUFFER_H_
#define OPENREG_DEVICE_DAEMON_MEMORY_DEVICE_BUFFER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "device_daemon/memory/arena_allocator.h"

namespace openreg::daemon {

class DeviceBuffer {
 public:
  // `arena` must outlive the buffer.
  static absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(
      ArenaAllocator* arena, uint64_t size);

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  int device() const { return arena_->device(); }
  uint64_t address() const { return address_; }
  // The size the client asked for (the block may be larger).
  uint64_t size() const { return size_; }
  // Daemon-side pointer to the first byte.
  char* data() const { return data_; }
  // True once the device was reset after this block was allocated: its
  // contents are gone, as on real hardware.
  bool lost() const { return generation_ != arena_->generation(); }

 private:
  DeviceBuffer(ArenaAllocator* arena, uint64_t address, uint64_t size,
               char* data)
      : arena_(arena),
        address_(address),
        size_(size),
        data_(data),
        generation_(arena->generation()) {}

  ArenaAllocator* const arena_;
  const uint64_t address_;
  const uint64_t size_;
  char* const data_;
  const uint64_t generation_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_MEMORY_DEVICE_BUFFER_H_
