#include "device_daemon/faults/command_facts.h"

#include "absl/strings/str_cat.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

proto::CommandKind KindOf(const proto::Command& command) {
  switch (command.body_case()) {
    case proto::Command::kLaunch:
    case proto::Command::kLaunchModule:
      return proto::KERNEL;
    case proto::Command::kH2D:
    case proto::Command::kD2H:
    case proto::Command::kD2D:
    case proto::Command::kMemset:
      return proto::COPY;
    case proto::Command::kFree:
      return proto::FREE;
    case proto::Command::kCollective:
      return proto::COLLECTIVE;
    default:
      return proto::OTHER;  // events, waits
  }
}

}  // namespace

CommandFacts FactsOfCommand(const StreamContext& context,
                            const proto::Command& command,
                            absl::string_view name) {
  CommandFacts facts;
  facts.session_id = context.session->id();
  facts.pid = context.session->pid();
  facts.device = context.device;
  facts.stream = context.slot_index;
  facts.kind = KindOf(command);
  facts.phase = command.phase();
  facts.sequence = command.sequence();
  if (command.has_launch()) {
    facts.name = command.launch().name();
    facts.overload = command.launch().overload();
    facts.written_tensors = command.launch().outputs_size();
    for (const proto::Argument& argument : command.launch().arguments()) {
      facts.tensor_arguments += argument.has_tensor() ? 1 : 0;
    }
  } else if (command.has_launch_module()) {
    facts.name = command.launch_module().kernel();
    for (const proto::ModuleArgument& argument :
         command.launch_module().arguments()) {
      facts.tensor_arguments += argument.has_tensor() ? 1 : 0;
      facts.written_tensors += argument.written() ? 1 : 0;
    }
  } else {
    facts.name = name;
  }
  if (command.has_collective()) {
    facts.collective_number = command.collective().number();
  }
  return facts;
}

CommandFacts FactsOfAllocation(const Session& session, int device) {
  CommandFacts facts;
  facts.session_id = session.id();
  facts.pid = session.pid();
  facts.device = device;
  facts.kind = proto::ALLOCATION;
  facts.name = "allocation";
  return facts;
}

std::string CommandLabel(const CommandFacts& facts) {
  if (facts.overload.empty()) return std::string{facts.name};
  return absl::StrCat(facts.name, ".", facts.overload);
}

std::string WhereFired(const CommandFacts& facts) {
  if (facts.kind == proto::ALLOCATION) {
    return absl::StrCat("an allocation on openreg:", facts.device);
  }
  return absl::StrCat(CommandLabel(facts), " on openreg:", facts.device,
                      " stream ", facts.stream);
}

}  // namespace openreg::daemon
