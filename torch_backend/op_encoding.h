// The client's half of the op wire format (op_codec/op_codec.h): openreg
// tensors travel as TensorRefs of their device memory, and daemon-allocated
// results become openreg tensors. Errors are thrown as c10 exceptions.
#ifndef OPENREG_TORCH_BACKEND_OP_ENCODING_H_
#define OPENREG_TORCH_BACKEND_OP_ENCODING_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <vector>

#include "protos/commands.pb.h"

namespace openreg::torch_backend {

// Describes an openreg tensor's memory: element-0 address, sizes, strides.
void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref);

// Encodes one stack value. openreg tensors travel by reference; CPU tensors
// only by value (0-dim scalars, or index tensors where CUDA accepts them).
void EncodeArgument(const c10::IValue& value, proto::Argument* argument);

// Wraps memory the daemon allocated for this session (a synchronous op's
// output) as an openreg tensor that frees it when released.
at::Tensor WrapDaemonTensor(const proto::TensorRef& ref);

// Decodes one result of a synchronous op.
c10::IValue DecodeResult(const proto::Argument& result);

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

#endif  // OPENREG_TORCH_BACKEND_OP_ENCODING_H_
