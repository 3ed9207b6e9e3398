// Resolves a launch's (name, overload) to its dispatcher entry, once per
// operator and stream worker thread, together with the operator's out=
// variant: an asynchronous launch of a functional op whose outputs the
// client already allocated runs the out= kernel straight into them instead
// of letting the kernel allocate a result the daemon would then copy.
//
// Included by the op runner's own files only (it pulls in the dispatcher
// headers).
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_OP_TABLE_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_OP_TABLE_H_

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace openreg::daemon {

struct ResolvedOp {
  c10::OperatorHandle handle;
  // Tagged pointwise in ATen (at::Tag::pointwise): each output element
  // depends on its own input elements only (launch_threads.h); also a
  // foreach op whose per-tensor op is.
  bool pointwise = false;
  // For a structured op's functional variant: the out= overload taking the
  // same arguments followed by one out= tensor per return; else absent.
  std::optional<c10::OperatorHandle> out_variant;
  // An op a plain loop may run (PointwiseKernel::MayMatch).
  bool pointwise_loop = false;
  // For the first kLearnedOutputs outputs of a kernel that allocates its
  // results: which allocation of the output's size it returned in its last
  // launch on this thread (0: the first), the one to place in the client's
  // output memory next time (kernel_workspace.h, placement).
  static constexpr int kLearnedOutputs = 8;
  mutable std::array<uint8_t, kLearnedOutputs> result_allocation{};
};

// nullptr when no operator has this name and overload. The entry lives
// until the calling thread exits (operators are registered before the
// daemon serves clients and never unregistered).
const ResolvedOp* ResolveOp(const std::string& name,
                            const std::string& overload);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_OP_TABLE_H_
