#include "runtime_client/daemon_locator.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/socket_path.h"

namespace openreg::client {
namespace {

// "" for unset and empty variables alike: an empty value never configures
// anything.
std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

struct ConfiguredBinary {
  absl::Mutex mutex;
  std::string path ABSL_GUARDED_BY(mutex);
};

ConfiguredBinary& Configured() {
  // Leaked on purpose: may be used from other static destructors.
  static ConfiguredBinary* configured = new ConfiguredBinary;
  return *configured;
}

}  // namespace

std::string ResolveSocketPath() { return DaemonSocketPath(""); }

void SetConfiguredDaemonBinary(const std::string& path) {
  ConfiguredBinary& configured = Configured();
  absl::MutexLock lock(&configured.mutex);
  configured.path = path;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

AutospawnPlan PlanAutospawn(const std::string& socket_path) {
  AutospawnPlan plan;
  plan.allowed = GetEnv("OPENREG_AUTOSPAWN") != "0";
  plan.binary = GetEnv("OPENREG_DAEMON_BINARY");
  if (plan.binary.empty()) {
    ConfiguredBinary& configured = Configured();
    absl::MutexLock lock(&configured.mutex);
    plan.binary = configured.path;
  }
  std::string idle_exit_seconds = GetEnv("OPENREG_IDLE_EXIT_SECONDS");
  if (idle_exit_seconds.empty()) idle_exit_seconds = "300";
  plan.arguments.push_back(absl::StrCat("--socket=", socket_path));
  plan.arguments.push_back(
      absl::StrCat("--idle_exit_seconds=", idle_exit_seconds));
  for (absl::string_view argument :
       absl::StrSplit(GetEnv("OPENREG_DAEMON_ARGS"), ' ', absl::SkipEmpty())) {
    plan.arguments.emplace_back(argument);
  }
  plan.log_path = absl::StrCat(DirectoryOf(socket_path), "/daemon.log");
  return plan;
}

}  // namespace openreg::client
