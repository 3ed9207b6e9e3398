#include "device_daemon/server/socket_directory.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace openreg::daemon {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string Describe(const struct stat& info) {
  if (S_ISLNK(info.st_mode)) return "a symbolic link";
  if (S_ISREG(info.st_mode)) return "a regular file";
  if (S_ISDIR(info.st_mode)) return "a directory";
  if (S_ISSOCK(info.st_mode)) {
    return absl::StrCat("a socket of uid ", info.st_uid);
  }
  return "not a socket";
}

}  // namespace

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::StatusOr<SocketDirectory> SocketDirectory::Open(
    const std::string& socket_path) {
  const std::string directory = DirectoryOf(socket_path);
  const uid_t uid = getuid();
  const std::string advice = absl::StrCat(
      "; remove it (if it is yours) or choose a socket in a folder that only "
      "uid ",
      uid, " can write (--socket, $OPENREG_DAEMON_SOCKET)");
  if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create ", directory, ": ", std::strerror(errno)));
  }
  // O_NOFOLLOW: a symlink planted in place of the folder is refused, not
  // followed to wherever its owner points it.
  const int fd =
      open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int saved = errno;
    if (saved == ELOOP || saved == ENOTDIR) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the socket folder ", directory,
          " is a symbolic link or not a directory; refusing to put the "
          "daemon socket there",
          advice));
    }
    return absl::InternalError(
        absl::StrCat("cannot open ", directory, ": ", std::strerror(saved)));
  }
  SocketDirectory opened(fd, directory);
  // Checked on the open folder, so that it cannot be swapped after the
  // check.
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot stat ", directory, ": ", std::strerror(errno)));
  }
  const bool writable_by_others = (info.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  const bool sticky = (info.st_mode & S_ISVTX) != 0;
  // A folder's owner can replace any file in it, sticky or not, so only
  // this user's folders and root's (such as /tmp) are acceptable.
  if (info.st_uid != uid && info.st_uid != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket folder ", directory, " belongs to uid ", info.st_uid,
        ", not to uid ", uid,
        " (the daemon's); that user could replace the daemon's socket or "
        "plant symlinks there, so the daemon refuses it",
        advice));
  }
  // In a sticky folder others may add files but not replace ours.
  if (writable_by_others && !sticky) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket folder ", directory, " is writable by other users (mode ",
        absl::StrFormat("%04o", info.st_mode & 07777),
        "); they could replace the daemon's socket, so the daemon refuses "
        "it; run chmod 700 ",
        directory, advice));
  }
  return opened;
}

SocketDirectory::SocketDirectory(SocketDirectory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

SocketDirectory& SocketDirectory::operator=(SocketDirectory&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

SocketDirectory::~SocketDirectory() {
  if (fd_ >= 0) close(fd_);
}

absl::Status SocketDirectory::RemoveStaleSocket(const std::string& name) const {
  struct stat info;
  if (fstatat(fd_, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cannot stat ", path_, "/", name,
                                            ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(info.st_mode) || info.st_uid != getuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, "/", name, " is ", Describe(info),
        ", not a socket left by a daemon of uid ", getuid(),
        "; the daemon does not remove it: remove it yourself if it is "
        "yours, or choose another --socket"));
  }
  if (unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", path_, "/", name,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void SocketDirectory::RemoveOwnSocket(const std::string& name) const {
  struct stat info;
  if (fd_ >= 0 && fstatat(fd_, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISSOCK(info.st_mode) && info.st_uid == getuid()) {
    unlinkat(fd_, name.c_str(), 0);
  }
}

absl::Status SocketDirectory::RestrictSocket(const std::string& name,
                                             int mode) const {
  struct stat info;
  if (fstatat(fd_, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISSOCK(info.st_mode) || info.st_uid != getuid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path_, "/", name, " is not the socket the daemon just created"));
  }
  if (fchmodat(fd_, name.c_str(), mode, AT_SYMLINK_NOFOLLOW) != 0) {
    return absl::InternalError(absl::StrCat("cannot chmod ", path_, "/", name,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status SocketDirectory::RenameSocket(const std::string& from,
                                           const std::string& to) const {
  if (renameat2(fd_, from.c_str(), fd_, to.c_str(), RENAME_NOREPLACE) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", path_, "/", from,
                                            " to ", to, ": ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
