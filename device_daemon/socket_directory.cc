#include "device_daemon/socket_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace openreg::daemon {

absl::Status PrepareSocketDirectory(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos || slash == 0) return absl::OkStatus();
  const std::string directory = socket_path.substr(0, slash);
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create ", directory, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (stat(directory.c_str(), &info) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot stat ", directory, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(directory, " exists and is not a directory"));
  }
  if (info.st_uid != getuid() || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    // Shared directories such as /tmp are sticky: another user's files
    // cannot be replaced there, so they are fine to use.
    if ((info.st_mode & S_ISVTX) == 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          directory,
          " is writable by other users or owned by another user; refusing "
          "to put the daemon socket there"));
    }
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
