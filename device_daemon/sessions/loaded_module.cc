#include "device_daemon/sessions/loaded_module.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_plane/unique_fd.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

std::string DlError() {
  const char* reason = dlerror();
  return reason != nullptr ? reason : "unknown dlopen error";
}

}  // namespace

absl::StatusOr<std::shared_ptr<LoadedModule>> LoadedModule::Open(
    pid_t pid, int client_fd, uid_t session_uid, const std::string& name) {
  const std::string what =
      absl::StrCat("module ", name, " (client fd ", client_fd, ")");
  if (session_uid != geteuid()) {
    return MakeError(
        proto::PERMISSION_DENIED,
        absl::StrCat("cannot load ", what,
                     ": modules run inside the daemon, so only a client of "
                     "the daemon's own uid (",
                     geteuid(), ") may load them; this session's uid is ",
                     session_uid));
  }
  if (client_fd < 0) {
    return InvalidValueError(
        absl::StrCat("cannot load ", what, ": not a valid fd"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", client_fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return InvalidValueError(
        absl::StrCat("cannot load ", what, ": cannot open ", path, ": ",
                     std::strerror(errno),
                     "; the fd must stay open until LoadModule "
                     "returns"));
  }
  // Kept open while the module is loaded (see below) unless loading fails.
  UniqueFd closer(fd);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return MakeError(proto::INTERNAL, absl::StrCat("fstat of ", path, ": ",
                                                   std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return InvalidValueError(
        absl::StrCat("cannot load ", what, ": not a regular file"));
  }
  if (info.st_uid != session_uid && info.st_uid != 0) {
    return MakeError(proto::PERMISSION_DENIED,
                     absl::StrCat("cannot load ", what,
                                  ": the file belongs "
                                  "to uid ",
                                  info.st_uid, ", not to the session's uid ",
                                  session_uid, " or root"));
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return MakeError(
        proto::PERMISSION_DENIED,
        absl::StrCat("cannot load ", what,
                     ": group or others may write the file (mode ",
                     absl::Hex(info.st_mode & 07777),
                     "); a module must be writable by its owner only"));
  }
  // Loaded through our own fd: the file checked is the file loaded. The fd
  // stays open while the module is loaded: glibc reuses an already loaded
  // object of the same path name, so a later module must never get this
  // "/proc/self/fd/N" while the name is in use.
  const std::string own_path = absl::StrCat("/proc/self/fd/", fd);
  void* handle = dlopen(own_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return InvalidValueError(
        absl::StrCat("cannot load ", what, ": ", DlError()));
  }
  const auto abi =
      reinterpret_cast<ModuleAbiFunction>(dlsym(handle, kModuleAbiSymbol));
  const auto entry =
      reinterpret_cast<ModuleEntryFunction>(dlsym(handle, kModuleEntrySymbol));
  if (abi == nullptr || entry == nullptr || abi() != kModuleAbiVersion) {
    const std::string found = abi == nullptr
                                  ? absl::StrCat("no ", kModuleAbiSymbol)
                                  : absl::StrCat("ABI version ", abi());
    dlclose(handle);
    return InvalidValueError(absl::StrCat(
        "cannot load ", what, ": not an openreg module of ABI version ",
        kModuleAbiVersion, " (", found, entry == nullptr ? ", no " : "",
        entry == nullptr ? kModuleEntrySymbol : "",
        "; data_plane/module_abi.h)"));
  }
  return std::shared_ptr<LoadedModule>(
      new LoadedModule(handle, entry, name, closer.Release()));
}

LoadedModule::~LoadedModule() {
  dlclose(handle_);
  const std::string own_path = absl::StrCat("/proc/self/fd/", fd_);
  void* still_loaded = dlopen(own_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (still_loaded != nullptr) {
    // Kept mapped by glibc (a GNU-unique symbol): its name stays taken, so
    // the fd stays open for the daemon's lifetime (see the header).
    dlclose(still_loaded);
    return;
  }
  close(fd_);
}

}  // namespace openreg::daemon
