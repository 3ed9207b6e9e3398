#include "device_daemon/memory/host_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "data_plane/unique_fd.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
absl::StatusOr<std::shared_ptr<HostRegion>> HostRegion::Open(pid_t pid,
                                                             int client_fd,
                                                             uint64_t size,
                                                             uid_t owner) {
  if (client_fd < 0) {
    return InvalidValueError(
        absl::StrCat("host region fd ", client_fd, " is not a valid fd"));
  }
  if (size == 0 || size > kMaxHostRegionBytes) {
    return InvalidValueError(absl::StrCat("host region size ", size,
                                          " must be in [1, ",
                                          kMaxHostRegionBytes, "]"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", client_fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return InvalidValueError(absl::StrCat(
        "cannot open the client's host region fd ", client_fd, " (", path,
        "): ", std::strerror(errno),
        "; the fd must stay open until RegisterHostRegion returns"));
  }
  const UniqueFd closer(fd);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return MakeError(proto::INTERNAL, absl::StrCat("fstat of ", path, ": ",
                                                   std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode) || info.st_uid != owner) {
    return MakeError(
        proto::PERMISSION_DENIED,
        absl::StrCat("host region fd ", client_fd,
                     " is not a regular file of the session's uid ", owner));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return InvalidValueError(absl::StrCat(
        "host region fd ", client_fd,
        " must be a memfd sealed with F_SEAL_SHRINK (MFD_ALLOW_SEALING)"));
  }
  if (static_cast<uint64_t>(info.st_size) != size) {
    return InvalidValueError(absl::StrCat("host region fd ", client_fd, " has ",
                                          info.st_size, " bytes, not the ",
                                          size, " announced"));
  }
  // Not populated: a page is mapped when a copy first touches it, so a
  // region with holes (a sparse memfd) never makes the daemon allocate the
  // memory the client did not (MAP_POPULATE would fill every hole).
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return MakeError(proto::RESOURCE_EXHAUSTED,
                     absl::StrCat("cannot map host region fd ", client_fd, " (",
                                  size, " bytes): ", std::strerror(errno)));
  }
  return std::shared_ptr<HostRegion>(
      new HostRegion(static_cast<char*>(data), size));
}

HostRegion::~HostRegion() { munmap(data_, size_); }

}  // namespace openreg::daemon
