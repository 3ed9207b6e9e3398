// The reply side of one launch: delivers what the kernel produced, as
// OpRunner::Run (execution/op_runner.h) says. An asynchronous launch's
// results are copied into the client-allocated outputs; a synchronous
// launch's are copied into memory allocated in the session and described,
// with the kernel's warnings, by an OpReply in the stream's reply area. An
// asynchronous kernel's warnings wait in the stream's warning mailbox. It
// is the daemon's encoding half of the one op codec (op_codec/op_codec.h).
//
// Promises: every address it allocated is remembered until ReleaseResults,
// which a failed launch calls so that nothing leaks; a reply larger than
// the session's reply area fails the launch instead of overflowing it; the
// reply is published by the stream's completion counter, which advances
// after WriteReply returns. One per launch, on the stack of
// AtenOpRunner::Run.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_REPLY_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_REPLY_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device_daemon/execution/stream_context.h"
#include "device_daemon/kernels/launch_decoder.h"
#include "device_daemon/kernels/out_arguments.h"
#include "op_codec/op_codec.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

class LaunchReply : public op_codec::DeviceTensorCodec {
 public:
  // `decoder` gives the outputs' tensors.
  LaunchReply(const StreamContext& context, const proto::LaunchOp& op,
              LaunchDecoder& decoder)
      : context_(context),
        session_(*context.session),
        op_(op),
        decoder_(decoder) {}

  // The tensors a kernel returned on `stack`, one per output of its launch:
  // Tensor[] returns flattened, undefined tensors left out.
  static std::vector<at::Tensor> ReturnedTensors(
      const torch::jit::Stack& stack);
  // Copies each tensor an asynchronous kernel returned (ReturnedTensors)
  // into the matching output, unless the kernel already wrote there.
  absl::Status CopyToOutputs(std::vector<at::Tensor> produced);
  // Encodes a synchronous launch's results (`stack`; empty for a checked
  // launch, whose reply carries the warnings only), the out= stand-ins the
  // kernel resized and `warnings` into the stream's reply area.
  absl::Status WriteReply(const c10::FunctionSchema& schema,
                          const torch::jit::Stack& stack,
                          const OutArguments& out_arguments,
                          const std::vector<proto::KernelWarning>& warnings,
                          uint64_t sequence);
  // Leaves the warnings of an asynchronous kernel in the stream's mailbox.
  void PostWarnings(const std::vector<proto::KernelWarning>& warnings);

  // Tensors a synchronous launch returned in memory it allocated.
  const std::vector<proto::TensorRef>& reply_tensors() const {
    return reply_tensors_;
  }
  // Frees the synchronous results allocated so far (after a failure).
  void ReleaseResults();

  // op_codec::DeviceTensorCodec:
  // A synchronous result: copied into memory allocated in the session.
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override;
  // The reply side decodes nothing (arguments: launch_decoder.h).
  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override;

 private:
  // The device that owns synchronous results: the first device tensor
  // argument's, else the first Device argument's, else the stream's.
  int ResultDevice() const;

  const StreamContext& context_;
  Session& session_;
  const proto::LaunchOp& op_;
  LaunchDecoder& decoder_;
  std::vector<proto::TensorRef> reply_tensors_;
  // Synchronous results allocated so far; freed again if the launch fails.
  std::vector<uint64_t> result_addresses_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_REPLY_H_
