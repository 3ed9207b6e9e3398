// Owns a file descriptor and closes it once, so that early returns never
// leak fds into a long-running process (the client's connect path, the
// daemon's opening of a client's host region or module).
#ifndef OPENREG_DATA_PLANE_UNIQUE_FD_H_
#define OPENREG_DATA_PLANE_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace openreg {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_UNIQUE_FD_H_
