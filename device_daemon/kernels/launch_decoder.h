// The decode side of one launch: turns a LaunchOp's arguments into the
// argument stack its kernel is called with, and its TensorRefs into CPU
// tensors over the session's device memory. It is the daemon's decoding
// half of the one op codec (op_codec/op_codec.h): device tensors are CPU
// tensors over pinned session memory, devices are the CPU (ops run there,
// whatever device they target), generators are CPU engines seeded from the
// client generator's draw.
//
// Promises: nothing is trusted. Every TensorRef is checked (op_codec::
// CheckTensorRef, then the session's extent check) and its memory stays
// pinned for as long as ATen holds the tensor; device indices and sparse
// indices are checked before a kernel sees them. Errors name the op
// (launch_error.h). One decoder per launch, on the stack of
// AtenOpRunner::Run.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_DECODER_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_DECODER_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/RefcountedDeleter.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/kernels/decoded_launch.h"
#include "device_daemon/memory/device_buffer.h"
#include "op_codec/op_codec.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

// The seed of the CPU engine one random op runs with, from the client
// generator's (seed, offset).
uint64_t EngineSeed(const proto::GeneratorState& state);

class LaunchDecoder : public op_codec::DeviceTensorCodec {
 public:
  LaunchDecoder(const StreamContext& context, const proto::LaunchOp& op)
      : session_(*context.session), op_(op) {}
  ~LaunchDecoder();
  LaunchDecoder(const LaunchDecoder&) = delete;
  LaunchDecoder& operator=(const LaunchDecoder&) = delete;

  // A launch that runs again (a graph's, decoded_launch.h): Record keeps
  // what this decoder decodes in `decoded`; Replay takes it from there
  // instead (Acquired, so still valid), checking and pinning nothing.
  void Record(DecodedLaunch* decoded) { decoded_ = decoded; }
  void Replay(DecodedLaunch* decoded) {
    decoded_ = decoded;
    replaying_ = true;
  }

  // The kernel's argument stack: the launch's arguments decoded against
  // `schema`, then the schema's defaults for the ones the client left out.
  absl::StatusOr<torch::jit::Stack> BuildStack(
      const c10::FunctionSchema& schema);
  // Outputs are checked before the kernel runs so that a bad TensorRef
  // fails the launch without side effects.
  absl::Status ValidateOutputs() const;

  // A CPU tensor over the session memory `ref` names (extent validated,
  // memory pinned). Its dtype and bits were checked by op_codec::
  // CheckTensorRef (DecodeValue for arguments, ValidateOutputs for
  // outputs). A `growable` tensor's storage may be resized by the kernel: the
  // data then moves to daemon heap memory (see KernelLaunch::RunOutVariant).
  absl::StatusOr<at::Tensor> DeviceTensor(const proto::TensorRef& ref,
                                          bool growable = false);
  // An output's tensor, as DeviceTensor(ref); but when an argument of this
  // launch named the same tensor (an in-place op's self, an out=
  // argument), that argument's tensor, already checked and pinned, as long
  // as the kernel left its shape and memory as the client sent them. Only
  // outputs share: two arguments stay two tensors, as in the client. A
  // launch of more than kMostArgumentsSearched argument tensors decodes
  // its outputs afresh.
  static constexpr size_t kMostArgumentsSearched = 16;
  absl::StatusOr<at::Tensor> OutputTensor(const proto::TensorRef& ref);
  // The tensor BuildStack decoded for `ref` (one of the launch's argument
  // TensorRefs, by address), or null; always null in graph record and
  // replay, which keep their tensors in DecodedLaunch.
  const at::Tensor* ArgumentTensor(const proto::TensorRef* ref) const;

  // op_codec::DeviceTensorCodec:
  // The decode side encodes nothing (results: launch_reply.h).
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override;
  // An argument's tensor (outputs: OutputTensor).
  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override;
  // Ops run on the CPU inside the daemon, whatever device they target.
  absl::StatusOr<c10::Device> DecodeDevice(int32_t index) override;
  // Sparse kernels index memory with these values: ATen's own check
  // (every index within its dim's size) before any kernel sees them.
  absl::Status CheckSparseIndices(const at::Tensor& indices,
                                  c10::IntArrayRef sizes) override;
  absl::StatusOr<c10::IValue> DecodeGenerator(
      const proto::GeneratorState& state) override;

 private:
  absl::StatusOr<at::Tensor> DecodeDeviceTensor(const proto::TensorRef& ref,
                                                bool growable);
  // The pin that every tensor of this launch in the client storage starting
  // at `storage_start` (inside `buffer`) shares; see DeviceTensor.
  c10::RefcountedDeleterContext* SharedPin(
      const char* storage_start, std::shared_ptr<DeviceBuffer> buffer);

  // The decoded argument named exactly like `ref`, if the kernel has not
  // changed its shape or moved its memory; else null.
  const at::Tensor* UnchangedArgument(const proto::TensorRef& ref) const;

  Session& session_;
  const proto::LaunchOp& op_;
  DecodedLaunch* decoded_ = nullptr;
  bool replaying_ = false;
  // One per client storage the launch touches (few: a linear search), each
  // holding one reference of its own until the decoder ends.
  absl::InlinedVector<std::pair<const char*, c10::RefcountedDeleterContext*>, 4>
      pins_;
  // The argument tensors decoded so far, with the memory each started at
  // (few: a linear search). Kept only outside graph record and replay.
  struct DecodedArgument {
    const proto::TensorRef* ref;
    at::Tensor tensor;
    const void* data;
  };
  absl::InlinedVector<DecodedArgument, 4> arguments_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_DECODER_H_
