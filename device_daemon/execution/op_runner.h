// Runs one LaunchOp (an ATen op named in a ring command) on device memory.
// An interface free of ATen so that the command executor and the sessions
// build and test without libtorch (tests use a fake); the daemon's real
// runner is AtenOpRunner (aten_op_runner.h).
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_OP_RUNNER_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_OP_RUNNER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/execution/fault_hook.h"
#include "device_daemon/execution/stream_context.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// What a runner keeps of one launch to run the same launch again for less
// (a graph's recorded launch, replayed many times): opaque here.
class PreparedLaunch {
 public:
  virtual ~PreparedLaunch() = default;
};

class OpRunner {
 public:
  virtual ~OpRunner() = default;

  // Runs `op` on the stream `context` names and delivers its results:
  //  - asynchronous launch: into the client-allocated `op.outputs`;
  //  - synchronous launch: into memory allocated in the session, described
  //    by an OpReply in the stream's reply area, with reply_sequence =
  //    `sequence`.
  // Unknown ops and bad arguments are INVALID_VALUE; failures of the
  // kernel itself are KERNEL_FAILURE naming the op. Must not throw.
  // On success, `written` (when not null) receives the device tensors the
  // kernel wrote (outputs, in-place and out= arguments), for fault hooks.
  virtual absl::Status Run(const StreamContext& context,
                           const proto::LaunchOp& op, uint64_t sequence,
                           WrittenTensors* written) = 0;

  // Runs `op` as Run does, for a launch that runs again and again (a
  // graph's recorded launch: `op` is the same object every time).
  // `*prepared` holds what an earlier run of it kept, or null; the runner
  // alone decides whether that still holds, and leaves in `*prepared` what
  // the next run may use. Runners that keep nothing (the tests' fakes) run
  // it as any launch.
  virtual absl::Status RunRepeated(const StreamContext& context,
                                   const proto::LaunchOp& op, uint64_t sequence,
                                   WrittenTensors* written,
                                   std::unique_ptr<PreparedLaunch>* prepared) {
    (void)prepared;
    return Run(context, op, sequence, written);
  }

  // Makes the calling thread run a compiled kernel (LaunchModuleKernel)
  // with the client's per-thread settings: flush-denormal and the
  // intra-op thread count. A compiled kernel reads no process-wide ATen
  // setting, so it needs no turn at the settings gate. Returns the
  // intra-op thread count the kernel runs with (for the cost profile);
  // INVALID_VALUE when `settings` does not decode. Runners without ATen
  // (the tests' fakes) have no thread settings to apply and return 0.
  virtual absl::StatusOr<int> ApplyModuleSettings(
      const proto::KernelSettings& /*settings*/) {
    return 0;
  }
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_OP_RUNNER_H_
