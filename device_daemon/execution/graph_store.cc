#include "device_daemon/execution/graph_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"

namespace openreg::daemon {

bool HasGraphDraws(const proto::Command& command, uint32_t* highest) {
  *highest = 0;
  if (!command.has_launch()) return false;
  const proto::LaunchOp& launch = command.launch();
  bool found = false;
  auto note = [&](const proto::GeneratorState& state) {
    if (state.graph_generator() == 0) return;
    found = true;
    *highest = std::max(*highest, state.graph_generator());
  };
  if (launch.has_default_generator()) note(launch.default_generator());
  for (const proto::Argument& argument : launch.arguments()) {
    if (argument.has_generator()) note(argument.generator());
  }
  return found;
}

absl::Status ResolveGraphDraws(const proto::ReplayGraph& replay,
                               proto::Command* command) {
  if (!command->has_launch()) return absl::OkStatus();
  proto::LaunchOp& launch = *command->mutable_launch();
  auto resolve = [&replay](proto::GeneratorState* state) -> absl::Status {
    const uint32_t index = state->graph_generator();
    if (index == 0) return absl::OkStatus();
    if (index > static_cast<uint32_t>(replay.generators_size())) {
      return InvalidValueError(
          absl::StrCat("the replay of graph ", replay.graph(), " passes ",
                       replay.generators_size(),
                       " generator draws, and a recorded op "
                       "uses generator ",
                       index));
    }
    const proto::GeneratorState& draw =
        replay.generators(static_cast<int>(index - 1));
    state->set_seed(draw.seed());
    state->set_offset(draw.offset() + state->offset());
    state->set_graph_generator(0);
    return absl::OkStatus();
  };
  if (launch.has_default_generator()) {
    absl::Status resolved = resolve(launch.mutable_default_generator());
    if (!resolved.ok()) return resolved;
  }
  for (proto::Argument& argument : *launch.mutable_arguments()) {
    if (!argument.has_generator()) continue;
    absl::Status resolved = resolve(argument.mutable_generator());
    if (!resolved.ok()) return resolved;
  }
  return absl::OkStatus();
}

}  // namespace openreg::daemon
