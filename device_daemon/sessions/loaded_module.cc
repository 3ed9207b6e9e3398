#include "device_daemon/sessions/loaded_module.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/unique_fd.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {
namespace {

std::string DlError() {
  const char* reason = dlerror();
  return reason != nullptr ? reason : "unknown dlopen error";
}

std::string LoadName(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

// Whether a mapped library still answers to the load name of `fd`: by the
// name, or by the file (glibc matches both, so a library another session
// loaded under its own name counts too).
bool LoadNameInUse(int fd) {
  void* loaded = dlopen(LoadName(fd).c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (loaded == nullptr) return false;
  dlclose(loaded);
  return true;
}

// The fds of unloaded modules whose load names may still be in use (see
// the header), closed once they are not.
ABSL_CONST_INIT absl::Mutex g_reserved_mutex(absl::kConstInit);
std::vector<int>* g_reserved_fds ABSL_GUARDED_BY(g_reserved_mutex) = nullptr;

// Takes `fd` after its library's dlclose: closes it now if its name is
// free, or keeps it until a later release finds it free.
void ReleaseLoadName(int fd) {
  absl::MutexLock lock(&g_reserved_mutex);
  if (g_reserved_fds == nullptr) g_reserved_fds = new std::vector<int>();
  g_reserved_fds->push_back(fd);
  g_reserved_fds->erase(
      std::remove_if(g_reserved_fds->begin(), g_reserved_fds->end(),
                     [](int reserved) {
                       if (LoadNameInUse(reserved)) {
                         return false;
                       }
                       close(reserved);
                       return true;
                     }),
      g_reserved_fds->end());
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
  const std::string own_path = LoadName(fd);
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
  ReleaseLoadName(fd_);
}

}  // namespace openreg::daemon
