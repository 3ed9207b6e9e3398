#include "device_daemon/base/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/ascii.h"

namespace openreg::daemon {
namespace {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarning)};

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

void WriteLogLine(LogLevel level, absl::string_view message) {
  const char* tag = "";
  if (level == LogLevel::kError) tag = "error: ";
  if (level == LogLevel::kWarning) tag = "warning: ";
  // One fprintf per line: stdio locks the stream, so lines from different
  // threads do not interleave.
  std::fprintf(stderr, "openreg-daemon: %s%.*s\n", tag,
               static_cast<int>(message.size()), message.data());
}

}  // namespace openreg::daemon
