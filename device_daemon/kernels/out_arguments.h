// The out= arguments of a launch. Client memory cannot grow, but some out=
// kernels resize their output on the way (mse_loss.out with a reduction
// first writes the elementwise loss into it) or get a wrongly sized one. So
// the kernel writes a stand-in instead: an alias of the client's memory
// whose storage may grow, where a resize beyond it moves the data to daemon
// memory.
//
// Promises: a stand-in keeps its client tensor (and so its pin) alive.
// After a synchronous launch, FinishOutArguments leaves a stand-in defined
// only when the kernel changed its shape, and the reply hands it to the
// client to adopt (LaunchReply::WriteReply); an asynchronous launch copies
// the stand-ins into its outputs (LaunchReply::CopyToOutputs). Strided out=
// arguments only: a sparse out= is rebuilt by its kernel and returned.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_OUT_ARGUMENTS_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_OUT_ARGUMENTS_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace openreg::daemon {

// An out= argument: the client's tensor and the stand-in the kernel wrote
// (and maybe resized or moved).
struct OutArgument {
  at::Tensor client;
  at::Tensor stand_in;
};
// By argument index.
using OutArguments = std::vector<std::pair<size_t, OutArgument>>;

// Gives the kernel growable stand-ins for the out= arguments in `stack`,
// recording them in `out_arguments`.
void ReplaceOutArguments(const c10::FunctionSchema& schema,
                         torch::jit::Stack* stack, OutArguments* out_arguments);
// Copies stand-ins that kept their shape back into client memory.
void FinishOutArguments(OutArguments* out_arguments);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_OUT_ARGUMENTS_H_
