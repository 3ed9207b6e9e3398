// Owns a file descriptor and closes it once, so that early returns on the
// connect path never leak sockets into a long-running process.
#ifndef OPENREG_RUNTIME_CLIENT_UNIQUE_FD_H_
#define OPENREG_RUNTIME_CLIENT_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace openreg::client {

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

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_UNIQUE_FD_H_
