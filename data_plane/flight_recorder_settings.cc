#include "data_plane/flight_recorder_settings.h"

#include <cstdlib>

#include "absl/strings/numbers.h"

namespace openreg {
namespace {

// The first of two variables that is set, or null.
const char* Either(const char* name, const char* alias) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : std::getenv(alias);
}

}  // namespace

FlightRecorderSettings FlightRecorderSettingsFromEnvironment() {
  FlightRecorderSettings settings;
  if (const char* entries =
          Either("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")) {
    uint32_t parsed = 0;
    if (absl::SimpleAtoi(entries, &parsed)) settings.entries = parsed;
  }
  const char* prefix =
      Either("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
  if (prefix != nullptr && *prefix != '\0') {
    settings.prefix = prefix;
    settings.dump_on_timeout = true;
  }
  if (const char* on_timeout = std::getenv("TORCH_NCCL_DUMP_ON_TIMEOUT")) {
    settings.dump_on_timeout = std::string(on_timeout) == "1";
  }
  return settings;
}

}  // namespace openreg
