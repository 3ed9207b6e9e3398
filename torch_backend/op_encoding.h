// The client's half of the op wire format (op_codec/op_codec.h): openreg
// tensors travel as TensorRefs of their device memory, and daemon-allocated
// results become openreg tensors. Errors are thrown as c10 exceptions.
#ifndef OPENREG_TORCH_BACKEND_OP_ENCODING_H_
#define OPENREG_TORCH_BACKEND_OP_ENCODING_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

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

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_OP_ENCODING_H_
