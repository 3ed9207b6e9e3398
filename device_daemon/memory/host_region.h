// A pinned host region: a client's memfd mapped into the daemon, so that
// copies to and from it need no staging. The client names the memfd by its
// fd number; the daemon opens it through /proc/<client pid>/fd/<n> (gRPC
// cannot carry fds) and maps it only when it is a memfd of the session's
// user with exactly the announced size and sealed against shrinking: a
// client truncating a mapped region would otherwise make the daemon fault
// (SIGBUS) on its next copy.
#ifndef OPENREG_DEVICE_DAEMON_MEMORY_HOST_REGION_H_
#define OPENREG_DEVICE_DAEMON_MEMORY_HOST_REGION_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace openreg::daemon {

// Largest single region (the client's own memory; this only rejects
// nonsense sizes before mmap).
inline constexpr uint64_t kMaxHostRegionBytes = uint64_t{1} << 40;

class HostRegion {
 public:
  // Opens, validates and maps fd `client_fd` of process `pid`. Errors name
  // what did not match.
  static absl::StatusOr<std::shared_ptr<HostRegion>> Open(pid_t pid,
                                                          int client_fd,
                                                          uint64_t size,
                                                          uid_t owner);

  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;
  ~HostRegion();

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  HostRegion(char* data, uint64_t size) : data_(data), size_(size) {}

  char* const data_;
  const uint64_t size_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_MEMORY_HOST_REGION_H_
