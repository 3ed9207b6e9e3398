#include "device_daemon/base/log.h"

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace openreg::daemon {
namespace {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarning)};
// Null: stderr. Set once, before threads log (SetLogFile).
std::FILE* g_log_file = nullptr;

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "error") return LogLevel::kError;
  if (lower == "warning") return LogLevel::kWarning;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "debug") return LogLevel::kDebug;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "' (use error, warning, info or debug)"));
}

void SetLogLevel(LogLevel level) {
  g_log_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

absl::Status SetLogFile(const std::string& path) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  std::FILE* file = fd >= 0 ? fdopen(fd, "a") : nullptr;
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log_file: cannot open ", path, ": ", std::strerror(errno)));
  }
  std::setvbuf(file, nullptr, _IOLBF, 0);  // each line reaches the file
  g_log_file = file;
  return absl::OkStatus();
}

void WriteLogLine(LogLevel level, absl::string_view message) {
  const char* tag = "";
  if (level == LogLevel::kError) tag = "error: ";
  if (level == LogLevel::kWarning) tag = "warning: ";
  // One fprintf per line: stdio locks the stream, so lines from different
  // threads do not interleave.
  if (g_log_file == nullptr) {
    std::fprintf(stderr, "openreg-daemon: %s%.*s\n", tag,
                 static_cast<int>(message.size()), message.data());
    return;
  }
  const std::string time = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                            absl::UTCTimeZone());
  std::fprintf(g_log_file, "%s openreg-daemon: %s%.*s\n", time.c_str(), tag,
               static_cast<int>(message.size()), message.data());
}

}  // namespace openreg::daemon
