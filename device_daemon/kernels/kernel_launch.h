// The run of one launch: resolves the op in the dispatcher, has the
// decoder build its argument stack, calls the kernel and has the reply
// deliver the results. In between it owns what surrounds the call: the
// out= stand-ins (out_arguments.h), a structured op run as its out=
// overload straight into the client's outputs, the CPU default generator
// seeded for ops that borrow it, and the c10 warning handlers that collect
// the kernel's warnings (for the reply, or the stream's mailbox when the
// launch is asynchronous).
//
// Promises: a bad argument or output fails the launch before the kernel
// runs; on success `written` names every device tensor the kernel wrote.
// Kernel exceptions pass through (AtenOpRunner::Run turns them into
// errors). One per launch, on the stack of AtenOpRunner::Run, over the
// decoder and reply it is given.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LAUNCH_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LAUNCH_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/execution/command_timing.h"
#include "device_daemon/execution/fault_hook.h"
#include "device_daemon/kernels/core_sharing.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/launch_decoder.h"
#include "device_daemon/kernels/launch_reply.h"
#include "device_daemon/kernels/op_table.h"
#include "device_daemon/kernels/out_arguments.h"
#include "op_codec/kernel_settings.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class KernelLaunch {
 public:
  // `resolved` is the op's dispatcher entry (ResolveOp), null when no
  // operator has its name: the launch then fails at Run. `timing` (may be
  // null) gets the decode and kernel stages.
  // `core_sharing` (may be null: never fewer threads) chooses the
  // kernel's threads while `client_busy` (core_sharing.h). `settings` are
  // the launch's, applied to this thread; `pointwise_loops` (may be null)
  // counts the launches run as a plain loop (pointwise_kernel.h).
  KernelLaunch(const proto::LaunchOp& op, const ResolvedOp* resolved,
               LaunchDecoder& decoder, LaunchReply& reply,
               CommandTiming* timing, CoreSharing* core_sharing,
               bool client_busy, const op_codec::KernelSettings& settings,
               std::atomic<uint64_t>* pointwise_loops)
      : op_(op),
        decoder_(decoder),
        reply_(reply),
        timing_(timing),
        resolved_(resolved),
        core_sharing_(core_sharing),
        client_busy_(client_busy),
        settings_(settings),
        pointwise_loops_(pointwise_loops) {}

  // On success, `written` (if not null) gets the tensors the kernel wrote.
  absl::Status Run(uint64_t sequence, WrittenTensors* written);

 private:
  // Decodes and runs the op (Run without the bookkeeping).
  absl::Status RunKernel(uint64_t sequence);
  void CollectWritten(const c10::FunctionSchema& schema,
                      WrittenTensors* written) const;
  // The steps of Run, in order.
  // KERNEL_NOT_IMPLEMENTED_ERROR naming the op: no operator has its name.
  absl::Status UnknownOperator() const;
  absl::Status RunAsynchronous(const ResolvedOp& resolved,
                               torch::jit::Stack* stack);
  // Runs the launch as a plain loop (pointwise_kernel.h) when it matches
  // one; nullopt when ATen must run it.
  std::optional<absl::Status> RunAsLoop();
  // After a kernel ran with a placement of its outputs: for each result
  // that took none, which allocation it was (kernel_workspace.h), so that
  // the op's next launch on this thread places that one.
  void LearnResultAllocations(const ResolvedOp& resolved,
                              const std::vector<KernelWorkspace::Slot>& slots,
                              const std::vector<int>& slot_outputs,
                              const std::vector<at::Tensor>& returned);
  absl::Status RunSynchronous(const c10::OperatorHandle& handle,
                              torch::jit::Stack* stack, uint64_t sequence);
  // An asynchronous launch the client waits for: the reply carries the
  // kernel's warnings only.
  absl::Status RunChecked(const ResolvedOp& resolved, torch::jit::Stack* stack,
                          uint64_t sequence);

  // Runs a structured op's out= overload on `stack` (the functional
  // arguments) followed by the launch's outputs: the kernel writes the
  // results in place. Client outputs are sized by the Meta kernel, which
  // for structured ops is the out= kernel's own shape logic, so no
  // growable stand-ins are needed (a resize would fail the launch).
  absl::Status RunOutVariant(const c10::OperatorHandle& out_variant,
                             torch::jit::Stack* stack);
  // Calls the kernel, with one thread fewer while a busy client shares
  // the cores (core_sharing.h); ops that borrow the daemon's CPU default
  // generator get it seeded from the launch's draw, under its lock.
  void Call(const c10::OperatorHandle& handle, torch::jit::Stack* stack);

  const proto::LaunchOp& op_;
  LaunchDecoder& decoder_;
  LaunchReply& reply_;
  CommandTiming* const timing_;
  const ResolvedOp* const resolved_;
  CoreSharing* const core_sharing_;
  const bool client_busy_;
  const op_codec::KernelSettings& settings_;
  std::atomic<uint64_t>* const pointwise_loops_;
  OutArguments out_arguments_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_KERNEL_LAUNCH_H_
