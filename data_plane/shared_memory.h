// An anonymous shared-memory segment (memfd) mapped into this process. The
// daemon creates one per session and passes its fd to the client.
#ifndef OPENREG_DATA_PLANE_SHARED_MEMORY_H_
#define OPENREG_DATA_PLANE_SHARED_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace openreg {

class SharedMemory {
 public:
  // Creates a zero-filled segment of `size` bytes and maps it.
  static absl::StatusOr<SharedMemory> Create(const std::string& name,
                                             uint64_t size);
  // Maps an existing segment; takes ownership of `fd`.
  static absl::StatusOr<SharedMemory> Map(int fd, uint64_t size);

  SharedMemory() = default;
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  SharedMemory(int fd, void* data, uint64_t size)
      : fd_(fd), data_(data), size_(size) {}
  void Reset();

  int fd_ = -1;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_SHARED_MEMORY_H_
