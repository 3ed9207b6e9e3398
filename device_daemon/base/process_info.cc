#include "device_daemon/base/process_info.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace openreg::daemon {

std::string ProcessCommandLine(pid_t pid) {
  // Plain reads, no streams: the process may exit between the open and a
  // read, which then fails with ESRCH; libstdc++'s streambuf iterators
  // throw on that, and a client's exit must never take the daemon down.
  const std::string path = absl::StrCat("/proc/", pid, "/cmdline");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got > 0) {
      text.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) text.clear();  // gone meanwhile: nothing reliable to show
    break;
  }
  close(fd);
  // Arguments end with NUL, the last one too.
  while (!text.empty() && text.back() == '\0') text.pop_back();
  // One line, whatever the arguments hold (python -c scripts do hold
  // newlines): a log line or a table row stays one.
  return absl::StrReplaceAll(
      text, {{std::string(1, '\0'), " "}, {"\n", " "}, {"\r", " "}});
}

}  // namespace openreg::daemon
