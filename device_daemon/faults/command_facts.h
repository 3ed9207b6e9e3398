// What a fault's trigger can know about a command (or an allocation), taken
// once per command from the command and its stream, and how faults name
// that command in their errors and log records.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_FACTS_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_FACTS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "device_daemon/execution/stream_context.h"
#include "protos/commands.pb.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

class Session;

struct CommandFacts {
  uint64_t session_id = 0;
  int pid = 0;
  int device = 0;
  uint32_t stream = 0;
  proto::CommandKind kind = proto::OTHER;
  absl::string_view name;      // "aten::add", "copy_host_to_device"
  absl::string_view overload;  // "Tensor" (kernels only)
  proto::CommandPhase phase = proto::FORWARD;
  int written_tensors = 0;   // kernels: outputs the launch names
  int tensor_arguments = 0;  // kernels: device tensor arguments
  uint64_t sequence = 0;     // the command's sequence on its stream
  // Collectives (CollectiveView): the c10d group's name and description,
  // the rank issuing it (-1 for other commands) and its number.
  std::string group;
  std::string group_desc;
  int rank = -1;
  uint64_t collective_number = 0;
};

// The facts of `command` on `context`'s stream. `name` names a command
// that is not a launch (CommandName()); it must outlive the facts.
CommandFacts FactsOfCommand(const StreamContext& context,
                            const proto::Command& command,
                            absl::string_view name);

// The facts of an allocation by `session` on `device`.
CommandFacts FactsOfAllocation(const Session& session, int device);

// "aten::add.Tensor", "copy_host_to_device": the command as records name it.
std::string CommandLabel(const CommandFacts& facts);

// "aten::add.Tensor on openreg:0 stream 3", "an allocation on openreg:1":
// where a fault fired, as its error messages say.
std::string WhereFired(const CommandFacts& facts);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_COMMAND_FACTS_H_
