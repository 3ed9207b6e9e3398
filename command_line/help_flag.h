// `--help` for openreg's command-line programs (openreg-daemon,
// openreg-ctl): prints the usage message and the program's own flags, each
// with its help and default, on stdout and exits 0, as Unix tools do.
//
// Why not absl's --help: it lists only flags defined in a file named after
// the program or "main", which neither program has (the daemon's flags
// live in device_daemon/server/flags.cc, openreg-ctl's in openreg_ctl.cc),
// so it printed "No flags matched." and exited 1. `--helpfull` still goes
// to absl and lists every flag linked in, Abseil's and gRPC's included.
#ifndef OPENREG_COMMAND_LINE_HELP_FLAG_H_
#define OPENREG_COMMAND_LINE_HELP_FLAG_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace openreg::command_line {

// The help text: absl::ProgramUsageMessage(), then every flag defined in a
// source file whose path starts with one of `flag_sources` (workspace
// paths, e.g. "device_daemon/"), sorted by name.
std::string HelpText(const std::vector<std::string>& flag_sources);

// When argv holds --help, -help or -h (before any "--"), prints
// HelpText(flag_sources) to `out` and exits 0. Call after
// absl::SetProgramUsageMessage and before absl::ParseCommandLine.
void ExitIfHelpRequested(int argc, char** argv,
                         const std::vector<std::string>& flag_sources,
                         std::ostream& out);

}  // namespace openreg::command_line

#endif  // OPENREG_COMMAND_LINE_HELP_FLAG_H_
