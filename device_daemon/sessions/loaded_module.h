// A compiled module loaded into the daemon for one session
// (data_plane/module_abi.h): the client's shared library, opened through
// the client's own fd, checked, dlopen'ed and resolved to its entry.
//
// Trust model, as for --kernel_library: a module's code runs inside the
// daemon with the daemon's rights, so only a client of the daemon's own uid
// may load one, and only a regular file owned by that uid (or root) that
// neither group nor others may write. A C++ exception is caught by the
// module's entry and fails the launch; a crash in a module's kernel is
// caught where that can be done (execution/module_crash_guard.h): the
// daemon does not sandbox modules.
//
// Load names: a library is loaded as /proc/self/fd/<fd>, and glibc hands
// an already mapped library back to a dlopen of a name it answers to. A
// library can outlive its module's dlclose: one that defines a GNU-unique
// symbol (g++ makes one of an inline variable or a template's static, so
// Inductor's kernels have one unless built with -fno-gnu-unique) is never
// unmapped, and one that another session loaded too (the same file, found
// by inode) stays until that session unloads it. So an unloaded module's
// fd is closed only once no mapped library answers to its name: until
// then no later module can get that name and run another library's code.
#ifndef OPENREG_DEVICE_DAEMON_SESSIONS_LOADED_MODULE_H_
#define OPENREG_DEVICE_DAEMON_SESSIONS_LOADED_MODULE_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "data_plane/module_abi.h"

namespace openreg::daemon {

class LoadedModule {
 public:
  // Opens /proc/<pid>/fd/<client_fd> of the session's client, checks it
  // (see above: `session_uid` must be the daemon's effective uid) and
  // loads it. PERMISSION_DENIED for a module the trust model refuses,
  // INVALID_VALUE for a file that is not a loadable module of this ABI.
  static absl::StatusOr<std::shared_ptr<LoadedModule>> Open(
      pid_t pid, int client_fd, uid_t session_uid, const std::string& name);

  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  // dlclose, then closes the file once its load name is free (above).
  ~LoadedModule();

  const std::string& name() const { return name_; }
  ModuleEntryFunction entry() const { return entry_; }

 private:
  LoadedModule(void* handle, ModuleEntryFunction entry, std::string name,
               int fd)
      : handle_(handle), entry_(entry), name_(std::move(name)), fd_(fd) {}

  void* const handle_;
  const ModuleEntryFunction entry_;
  const std::string name_;
  // The daemon's fd of the library, loaded as /proc/self/fd/<fd_>: open as
  // long as a mapped library answers to that name (above).
  const int fd_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SESSIONS_LOADED_MODULE_H_
