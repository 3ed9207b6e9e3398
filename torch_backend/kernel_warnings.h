// The warnings the daemon's kernels raise, raised again in this process as
// c10 warnings (Python sees UserWarning / DeprecationWarning, through its
// warning filters) with the kernel's category and source location. They
// arrive two ways: in the reply of a synchronous or checked launch, and in
// the streams' warning mailboxes for asynchronous launches, which the
// client drains after every synchronizing call, where a CUDA program would
// see them too.
//
// Owns the process's warning bookkeeping. Promises: a kernel's
// TORCH_WARN_ONCE warning is raised once per process and source location
// (unless torch.set_warn_always(True)), as on CPU, although the daemon
// raises it at every call; a warning already raised at the call from a
// signature's checked reply is not raised again when the same warning
// comes back through the mailbox. The bookkeeping is bounded (4096
// entries each) and thread-safe.
#ifndef OPENREG_TORCH_BACKEND_KERNEL_WARNINGS_H_
#define OPENREG_TORCH_BACKEND_KERNEL_WARNINGS_H_

#include <c10/util/Exception.h>

#include <vector>

#include "protos/commands.pb.h"

namespace openreg::torch_backend {

// The warnings the daemon's kernel raised for a synchronous or checked
// launch, as c10 warnings of the same category and source location.
std::vector<c10::Warning> KernelWarnings(const proto::OpReply& reply);

// Raises the warnings asynchronous kernels left in the session's
// mailboxes (openreg::TakeKernelWarnings); called after every
// synchronizing call, where a CUDA program would see them too.
void RaisePendingKernelWarnings();

// Raises them in this process (Python sees UserWarning / DeprecationWarning,
// through its warning filters). A TORCH_WARN_ONCE warning of a daemon
// kernel is raised once per process and source location, unless
// torch.set_warn_always(True), as CPU does.
void RaiseWarnings(const std::vector<c10::Warning>& warnings);

// RaiseWarnings for the warnings an op signature's checked launch returned,
// raised again at each later launch of the signature (at the call, as on
// CPU). The same warnings coming back through the mailbox from those
// launches are then not raised a second time.
void RaiseWarningsAtCall(const std::vector<c10::Warning>& warnings);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNEL_WARNINGS_H_
