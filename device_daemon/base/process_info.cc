#include "device_daemon/base/process_info.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace openreg::daemon {

std::string ProcessCommandLine(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  // Arguments end with NUL, the last one too.
  while (!text.empty() && text.back() == '\0') text.pop_back();
  // One line, whatever the arguments hold (python -c scripts do hold
  // newlines): a log line or a table row stays one.
  return absl::StrReplaceAll(
      text, {{std::string(1, '\0'), " "}, {"\n", " "}, {"\r", " "}});
}

}  // namespace openreg::daemon
