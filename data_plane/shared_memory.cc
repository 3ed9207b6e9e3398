#include "data_plane/shared_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace openreg {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<SharedMemory> SharedMemory::Create(const std::string& name,
                                                  uint64_t size) {
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    absl::Status status = ErrnoError("ftruncate of shared memory");
    close(fd);
    return status;
  }
  return Map(fd, size);
}

absl::StatusOr<SharedMemory> SharedMemory::Map(int fd, uint64_t size) {
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    absl::Status status = ErrnoError("mmap of shared memory");
    close(fd);
    return status;
  }
  return SharedMemory(fd, data, size);
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() { Reset(); }

void SharedMemory::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

}  // namespace openreg
