// The daemon's OpRunner: ATen's CPU kernels on daemon-owned device memory.
// Arguments are decoded and results encoded with the one op codec
// (op_codec/op_codec.h). kernels/ is the only part of the daemon that
// includes ATen (compiling its headers is slow, and nothing else needs it).
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_ATEN_OP_RUNNER_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_ATEN_OP_RUNNER_H_

#include <cstdint>
#include <memory>

#include "device_daemon/execution/op_runner.h"
#include "device_daemon/kernels/core_sharing.h"
#include "device_daemon/kernels/kernel_settings_gate.h"

namespace openreg::daemon {

class DecodedLaunch;

class AtenOpRunner : public OpRunner {
 public:
  // Makes TORCH_WARN_ONCE warn at every call in this process (as
  // torch.set_warn_always(True) does): once per daemon would mean once for
  // the first client only. Such warnings are marked (warn_once_probe.h)
  // and each client raises them once per process.
  // Each kernel may hold at most `workspace_limit_bytes` of host memory in
  // the daemon (kernel_workspace.h; 0 = unlimited). `share_cores`: a busy
  // client's launches may run with one thread fewer (core_sharing.h).
  explicit AtenOpRunner(uint64_t workspace_limit_bytes = 0,
                        bool share_cores = true);

  // Looks the op up in the dispatcher, builds its argument stack (every
  // tensor validated against the session and pinned while the kernel
  // runs), calls it and delivers the results as OpRunner::Run says. An
  // asynchronous launch copies each returned tensor into the matching
  // output unless the op already wrote there (in place, out=, or a
  // structured op run as its out= overload).
  // Each kernel runs with the ATen settings its launch carried (the
  // client's default dtype, deterministic mode, ...; see
  // kernel_settings_gate.h).
  absl::Status Run(const StreamContext& context, const proto::LaunchOp& op,
                   uint64_t sequence, WrittenTensors* written) override;
  // Keeps a recorded launch's decoded arguments (decoded_launch.h) for
  // its next run, except for a launch the client waits for or one that
  // seeds the default generator.
  absl::Status RunRepeated(const StreamContext& context,
                           const proto::LaunchOp& op, uint64_t sequence,
                           WrittenTensors* written,
                           std::unique_ptr<PreparedLaunch>* prepared) override;
  absl::StatusOr<int> ApplyModuleSettings(
      const proto::KernelSettings& settings) override;

 private:
  // Run, with `decoded` recorded into or (`replaying`) taken from.
  absl::Status RunLaunch(const StreamContext& context,
                         const proto::LaunchOp& op, uint64_t sequence,
                         WrittenTensors* written, DecodedLaunch* decoded,
                         bool replaying);

  KernelSettingsGate settings_gate_;
  const uint64_t workspace_limit_bytes_;
  CoreSharing core_sharing_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_ATEN_OP_RUNNER_H_
