// Minimal leveled logging to stderr, or to a file (--log_file). Abseil
// 20220623 has no absl/log, and the daemon only needs a handful of
// human-readable lines prefixed with "openreg-daemon:" (in a file, after
// the time in UTC).
#ifndef OPENREG_DEVICE_DAEMON_BASE_LOG_H_
#define OPENREG_DEVICE_DAEMON_BASE_LOG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace openreg::daemon {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// "error", "warning", "info" or "debug".
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// Appends every later line to `path` (created 0600 if missing) instead of
// writing it to stderr; an error names the path. Call before any thread
// logs.
absl::Status SetLogFile(const std::string& path);

// Writes one line; errors and warnings are tagged as such.
void WriteLogLine(LogLevel level, absl::string_view message);

// Log(LogLevel::kInfo, "attached session ", id): the pieces are only
// concatenated when the level is enabled.
template <typename... Pieces>
void Log(LogLevel level, const Pieces&... pieces) {
  if (LogEnabled(level)) WriteLogLine(level, absl::StrCat(pieces...));
}

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_LOG_H_
