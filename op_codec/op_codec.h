// The op wire format: how one ATen op's arguments and results travel
// between the client's kernels (torch_backend) and the daemon's op runner,
// as proto::Argument values (protos/commands.proto). Both directions of the
// format are written here, once, and both sides link this library: the
// client encodes arguments and decodes results, the daemon decodes
// arguments and encodes results, with the same functions.
//
// What differs between the sides is only what a device tensor is: the
// client holds openreg tensors whose data pointer is a device address, the
// daemon holds CPU tensors over its own memory. Each side supplies that
// half as a DeviceTensorCodec. Small CPU tensors (0-dim scalars, index
// tensors) travel inline by value, the same way in both directions.
//
// Decoding never trusts its input: every field of a proto::Argument may
// come from a hostile client. A malformed value is an INVALID_VALUE status
// (data_plane/error_codes.h) naming the argument, never a crash or an
// out-of-bounds read. The interface speaks c10::IValue because both ends
// hold IValues; the ATen-free checks (sizes, strides, dtypes) are in
// data_plane/tensor_extent.h.
#ifndef OPENREG_OP_CODEC_OP_CODEC_H_
#define OPENREG_OP_CODEC_OP_CODEC_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protos/commands.pb.h"

namespace openreg::op_codec {

// Inline CPU tensors ride in the command ring, whose records are bounded.
inline constexpr int64_t kMaxInlineHostBytes = 64 * 1024;

// One side's half of the format: its device tensors and devices.
class DeviceTensorCodec {
 public:
  virtual ~DeviceTensorCodec() = default;

  // Encodes a defined tensor into `out` (a TensorRef, or inline bytes with
  // EncodeHostTensor). May fail (a CPU tensor too large to send inline, a
  // result the daemon cannot store).
  virtual absl::Status EncodeTensor(const at::Tensor& tensor,
                                    proto::Argument* out) = 0;
  // The tensor a TensorRef names on this side.
  virtual absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) = 0;

  // A Device argument as the index that travels, and back. The defaults
  // send the index as is and decode it to an openreg device.
  virtual int32_t EncodeDevice(const c10::Device& device);
  virtual absl::StatusOr<c10::Device> DecodeDevice(int32_t index);

  // A Generator argument from one draw of a client generator. Only the
  // daemon runs random ops; the default refuses.
  virtual absl::StatusOr<c10::IValue> DecodeGenerator(
      const proto::GeneratorState& state);

  // Checks the index values of a sparse COO tensor being decoded (shapes
  // and dtypes are checked by the codec). The daemon's kernels index
  // memory with them, so it must check them; the client trusts the
  // daemon's results (the default).
  virtual absl::Status CheckSparseIndices(const at::Tensor& indices,
                                          c10::IntArrayRef sizes);
};

// INVALID_VALUE for a quantized dtype: a host tensor travels as bytes,
// without a quantizer.
absl::Status CheckNotQuantized(int32_t dtype);
// What a TensorRef must satisfy beyond its extent (data_plane/
// tensor_extent.h): a quantized dtype exactly when it carries a per-tensor
// affine quantizer (a positive, finite scale), and the conjugate bit only
// on complex dtypes. DecodeValue checks every TensorRef it decodes; the
// daemon checks a launch's outputs with it too.
absl::Status CheckTensorRef(const proto::TensorRef& ref);

// The metadata of a view: element-0 address, sizes, strides, dtype, device
// index, the lazy conjugate/negative bits and, for a quantized tensor, its
// quantizer. Throws NotImplementedError for quantizers other than
// per-tensor affine.
void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref);

// The tensor a (checked) TensorRef describes, over `storage`, which holds
// its memory: a plain tensor with dispatch key `backend` (CPU in the
// daemon, PrivateUse1 in the client), or a quantized one (QuantizedCPU /
// QuantizedPrivateUse1) with the ref's quantizer. Both sides build device
// tensors with it.
at::Tensor TensorOverStorage(c10::Storage storage, c10::DispatchKey backend,
                             const proto::TensorRef& ref);

// A CPU tensor by value (contiguous bytes); INVALID_VALUE beyond
// kMaxInlineHostBytes.
absl::Status EncodeHostTensor(const at::Tensor& tensor, proto::HostTensor* out);
// Checks dtype, rank, sizes and that the byte count matches the shape.
absl::StatusOr<at::Tensor> DecodeHostTensor(const proto::HostTensor& host);

// Encodes one value. `type` is the schema type when known: a Number
// (Scalar) return keeps its kind as a proto::Scalar. Without it (null),
// the value's own kind decides. Undefined tensors travel as None.
absl::Status EncodeValue(const c10::IValue& value, const c10::TypePtr& type,
                         DeviceTensorCodec& tensors, proto::Argument* out);

// Decodes one value. With `schema` (the parameter it is passed for), the
// schema decides what the wire value becomes: None only for optionals, an
// int for a float parameter becomes a double, enum arguments (ScalarType,
// Layout, MemoryFormat) are range-checked, Tensor?[] boxes as optional
// tensors. Without it (null), the wire kind decides, and None elements of
// a tensor list become undefined tensors.
absl::StatusOr<c10::IValue> DecodeValue(const proto::Argument& argument,
                                        const c10::Argument* schema,
                                        DeviceTensorCodec& tensors);

}  // namespace openreg::op_codec

#endif  // OPENREG_OP_CODEC_OP_CODEC_H_
