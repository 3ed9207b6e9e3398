// The flight recorder's settings, from NCCL's environment variables (a
// user's NCCL job settings carry over): how many collectives each rank
// keeps and where traces are written. docs/DISTRIBUTED.md ("The flight
// recorder") documents them.
#ifndef OPENREG_DATA_PLANE_FLIGHT_RECORDER_SETTINGS_H_
#define OPENREG_DATA_PLANE_FLIGHT_RECORDER_SETTINGS_H_

#include <cstdint>
#include <string>

namespace openreg {

// NCCL's default trace file prefix; traces are <prefix><global rank>.
inline constexpr char kDefaultFlightRecorderPrefix[] = "/tmp/nccl_trace_rank_";
inline constexpr uint32_t kDefaultFlightRecorderEntries = 2000;

struct FlightRecorderSettings {
  // TORCH_FR_BUFFER_SIZE (or TORCH_NCCL_TRACE_BUFFER_SIZE); 0 records
  // nothing.
  uint32_t entries = kDefaultFlightRecorderEntries;
  // TORCH_FR_DUMP_TEMP_FILE (or TORCH_NCCL_DEBUG_INFO_TEMP_FILE), else the
  // default: where dumps on demand go.
  std::string prefix = kDefaultFlightRecorderPrefix;
  // Whether a collective's timeout writes the job's traces to `prefix`:
  // when a prefix is set in the environment, or TORCH_NCCL_DUMP_ON_TIMEOUT
  // is 1 (then also to the default prefix); TORCH_NCCL_DUMP_ON_TIMEOUT=0
  // turns it off.
  bool dump_on_timeout = false;
};

// The settings of this process's environment.
FlightRecorderSettings FlightRecorderSettingsFromEnvironment();

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_FLIGHT_RECORDER_SETTINGS_H_
