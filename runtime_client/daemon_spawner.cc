#include "runtime_client/daemon_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime_client/daemon_locator.h"
#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

// Everything the forked children need, prepared before fork(): after
// fork() in a multithreaded process only async-signal-safe calls are
// allowed, so no allocation happens there.
struct SpawnArguments {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::string log_path;
  std::string banner;
  int max_fd = 1024;
};

// Closes every descriptor above stderr so the daemon does not keep the
// client's sockets, pipes or a test harness's output open for its lifetime.
void CloseInheritedDescriptors(int max_fd) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd) close(fd);
}

[[noreturn]] void ExecDaemon(const SpawnArguments& spawn) {
  sigset_t all_signals;
  sigemptyset(&all_signals);
  sigprocmask(SIG_SETMASK, &all_signals, nullptr);
  const int null_fd = open("/dev/null", O_RDWR);
  // Never through a symlink, and only into this user's own file: the log
  // sits in the socket folder, which the daemon checks only after this.
  int log_fd =
      open(spawn.log_path.c_str(),
           O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NOCTTY, 0600);
  struct stat log_info;
  if (log_fd >= 0 &&
      (fstat(log_fd, &log_info) != 0 || !S_ISREG(log_info.st_mode) ||
       log_info.st_uid != getuid())) {
    close(log_fd);
    log_fd = -1;
  }
  if (log_fd < 0) log_fd = null_fd;
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
  }
  if (log_fd >= 0) dup2(log_fd, STDERR_FILENO);
  CloseInheritedDescriptors(spawn.max_fd);
  // One write of "<banner> (daemon pid N)\n", so that lines of clients
  // racing to start a daemon never interleave in the shared log. Formatted
  // by hand: only async-signal-safe calls are allowed here.
  char line[4096];
  size_t length = 0;
  auto append = [&](const char* text, size_t size) {
    size = std::min(size, sizeof(line) - 32 - length);
    std::memcpy(line + length, text, size);
    length += size;
  };
  static constexpr char kPidLabel[] = " (daemon pid ";
  append(spawn.banner.data(), spawn.banner.size());
  append(kPidLabel, sizeof(kPidLabel) - 1);
  char digits[24];
  size_t digit_count = 0;
  for (pid_t pid = getpid(); digit_count == 0 || pid > 0; pid /= 10) {
    digits[digit_count++] = static_cast<char>('0' + pid % 10);
  }
  while (digit_count > 0) line[length++] = digits[--digit_count];
  line[length++] = ')';
  line[length++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, length);
  execv(spawn.argv[0], spawn.argv.data());
  static constexpr char kExecFailed[] = "openreg: exec of the daemon failed\n";
  ignored = write(STDERR_FILENO, kExecFailed, sizeof(kExecFailed) - 1);
  (void)ignored;
  _exit(127);
}

}  // namespace

absl::Status SpawnDetachedDaemon(const std::string& binary,
                                 const std::vector<std::string>& arguments,
                                 const std::string& log_path) {
  if (access(binary.c_str(), X_OK) != 0) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: cannot start the daemon: ", binary,
                                  " is not an executable file (",
                                  std::strerror(errno), ")"));
  }
  // One level, like the daemon itself: the parent of the socket directory
  // ($XDG_RUNTIME_DIR or /tmp) is expected to exist.
  const std::string log_directory = DirectoryOf(log_path);
  if (mkdir(log_directory.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: cannot create ", log_directory,
                                  " for the daemon: ", std::strerror(errno)));
  }

  SpawnArguments spawn;
  spawn.strings.push_back(binary);
  spawn.strings.insert(spawn.strings.end(), arguments.begin(), arguments.end());
  for (std::string& value : spawn.strings) spawn.argv.push_back(value.data());
  spawn.argv.push_back(nullptr);
  spawn.log_path = log_path;
  spawn.banner = absl::StrCat("openreg: client pid ", getpid(), " started ",
                              absl::StrJoin(spawn.strings, " "));
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur != RLIM_INFINITY) {
    spawn.max_fd = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
  }

  const pid_t child = fork();
  if (child < 0) {
    return MakeError(Error::kDaemonUnavailable,
                     absl::StrCat("openreg: fork to start the daemon failed: ",
                                  std::strerror(errno)));
  }
  if (child == 0) {
    setsid();
    const pid_t grandchild = fork();
    if (grandchild == 0) ExecDaemon(spawn);
    _exit(grandchild < 0 ? 1 : 0);
  }
  int wait_status = 0;
  while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    return MakeError(Error::kDaemonUnavailable,
                     "openreg: could not fork the daemon process");
  }
  return absl::OkStatus();
}

}  // namespace openreg::client
