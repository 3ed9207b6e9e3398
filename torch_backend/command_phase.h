// Which phase of training issues the commands of this thread: backward
// (inside the autograd engine), optimizer (inside Optimizer.step, flagged by
// the global optimizer hooks torch_openreg registers) or forward
// (everything else). Stamped on every command for fault triggers and the
// command profile (docs/FAULT_INJECTION.md).
#ifndef OPENREG_TORCH_BACKEND_COMMAND_PHASE_H_
#define OPENREG_TORCH_BACKEND_COMMAND_PHASE_H_

namespace openreg::torch_backend {

// Sets the runtime's phase for the next commands of this thread from the
// autograd state. Called on every launch and copy path.
void StampCommandPhase();

// Between an optimizer step's pre and post hooks.
void SetInOptimizerStep(bool in_step);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_COMMAND_PHASE_H_
