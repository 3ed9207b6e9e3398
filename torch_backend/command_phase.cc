#include "torch_backend/command_phase.h"

#include <torch/csrc/autograd/graph_task.h>

#include "openreg/faults.h"
#include "protos/commands.pb.h"

namespace openreg::torch_backend {
namespace {

thread_local bool in_optimizer_step = false;

}  // namespace

void StampCommandPhase() {
  proto::CommandPhase phase = proto::FORWARD;
  if (in_optimizer_step) {
    phase = proto::OPTIMIZER;
  } else if (torch::autograd::get_current_graph_task_id() != -1) {
    phase = proto::BACKWARD;
  }
  SetCommandPhase(phase);
}

void SetInOptimizerStep(bool in_step) { in_optimizer_step = in_step; }

}  // namespace openreg::torch_backend
