#include "torch_backend/kernels/remote_launch.h"

#include <cstdlib>
#include <string_view>

#include "op_codec/kernel_settings.h"
#include "op_codec/launch_writer.h"
#include "openreg/launch.h"
#include "torch_backend/command_phase.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/generator.h"
#include "torch_backend/kernel_warnings.h"
#include "torch_backend/launch_settings.h"
#include "torch_backend/op_encoding.h"
#include "torch_backend/runtime_error.h"
#include "torch_backend/sync_debug.h"

namespace openreg::torch_backend {
namespace {

bool LaunchBlocking() {
  static const bool blocking = [] {
    const char* value = std::getenv("OPENREG_LAUNCH_BLOCKING");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return blocking;
}

// Every launch and copy asks for its stream here: the one place that also
// stamps the phase of training on the command.
StreamId CurrentStreamId(c10::DeviceIndex device) {
  StampCommandPhase();
  return static_cast<StreamId>(CurrentStream(device).id());
}

bool IsGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::OptionalType) {
    return IsGeneratorType(
        type->castRaw<c10::OptionalType>()->getElementType());
  }
  return type->kind() == c10::TypeKind::GeneratorType;
}

void EncodeDraw(const GeneratorDraw& draw, proto::GeneratorState* state) {
  state->set_seed(draw.seed);
  state->set_offset(draw.offset);
  state->set_graph_generator(draw.graph_generator);
}

void EncodeLaunch(const c10::OperatorHandle& op,
                  c10::ArrayRef<c10::IValue> arguments, c10::DeviceIndex device,
                  proto::LaunchOp* launch) {
  const c10::OperatorName& name = op.operator_name();
  launch->set_name(name.name);
  launch->set_overload(name.overload_name);
  const std::vector<c10::Argument>& parameters = op.schema().arguments();
  bool has_generator_parameter = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i < parameters.size() && IsGeneratorType(parameters[i].type())) {
      // `Generator? generator=None` means the device's default generator;
      // either way the op carries a draw, so the daemon never falls back
      // to its own (shared, unseeded) generator.
      has_generator_parameter = true;
      const at::Generator generator = arguments[i].isGenerator()
                                          ? arguments[i].toGenerator()
                                          : at::Generator();
      EncodeDraw(TakeDraw(generator, device),
                 launch->add_arguments()->mutable_generator());
      continue;
    }
    EncodeArgument(arguments[i], launch->add_arguments());
  }
  if (!has_generator_parameter && op.hasTag(at::Tag::nondeterministic_seeded)) {
    EncodeDraw(TakeDraw(at::Generator(), device),
               launch->mutable_default_generator());
  }
  // The client's settings travel with every kernel (nothing on the wire
  // while they are ATen's defaults).
  const op_codec::KernelSettings settings = LaunchSettings();
  if (settings != op_codec::KernelSettings()) {
    op_codec::EncodeKernelSettings(settings, launch->mutable_settings());
  }
}

void EncodeOutputs(c10::ArrayRef<at::Tensor> outputs, proto::LaunchOp* launch) {
  for (const at::Tensor& output : outputs) {
    if (output.defined()) EncodeTensorRef(output, launch->add_outputs());
  }
}

// The bytes EncodeLaunch and EncodeOutputs would serialize, written
// without building the proto (op_codec/launch_writer.h). False for a launch
// that draws random numbers or has an argument of a kind the writer does
// not take: EncodeLaunch then builds it.
bool WriteLaunch(const c10::OperatorHandle& op,
                 c10::ArrayRef<c10::IValue> arguments,
                 c10::ArrayRef<at::Tensor> outputs,
                 op_codec::LaunchWriter* writer) {
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return false;
  const c10::OperatorName& name = op.operator_name();
  writer->Begin(name.name, name.overload_name);
  const std::vector<c10::Argument>& parameters = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i < parameters.size() && IsGeneratorType(parameters[i].type())) {
      return false;
    }
    if (!writer->AddArgument(arguments[i])) return false;
  }
  for (const at::Tensor& output : outputs) {
    if (output.defined() && !writer->AddOutput(output)) return false;
  }
  const op_codec::KernelSettings settings = LaunchSettings();
  if (settings != op_codec::KernelSettings()) {
    thread_local proto::KernelSettings encoded;
    encoded.Clear();
    op_codec::EncodeKernelSettings(settings, &encoded);
    writer->SetSettings(encoded);
  }
  return true;
}

}  // namespace

void LaunchAsync(const c10::OperatorHandle& op,
                 c10::ArrayRef<c10::IValue> arguments,
                 c10::ArrayRef<at::Tensor> outputs, c10::DeviceIndex device) {
  // Reused per thread: the per-op path allocates nothing it can avoid.
  thread_local op_codec::LaunchWriter writer;
  thread_local proto::LaunchOp launch;
  const bool written = WriteLaunch(op, arguments, outputs, &writer);
  if (!written) {
    launch.Clear();
    EncodeLaunch(op, arguments, device, &launch);
    EncodeOutputs(outputs, &launch);
  }
  const StreamId stream = CurrentStreamId(device);
  OPENREG_CHECK(written ? LaunchSerializedOp(writer.bytes(), stream)
                        : LaunchOp(launch, stream));
  // OPENREG_LAUNCH_BLOCKING=1, like CUDA_LAUNCH_BLOCKING=1: every launch
  // waits for its kernel, so an error the kernel finds is raised here, at
  // the call that caused it.
  if (C10_UNLIKELY(LaunchBlocking())) {
    OPENREG_CHECK(StreamSynchronize(stream));
    RaisePendingKernelWarnings();
  }
}

std::vector<c10::Warning> LaunchChecked(const c10::OperatorHandle& op,
                                        c10::ArrayRef<c10::IValue> arguments,
                                        c10::ArrayRef<at::Tensor> outputs,
                                        c10::DeviceIndex device) {
  proto::LaunchOp launch;
  EncodeLaunch(op, arguments, device, &launch);
  EncodeOutputs(outputs, &launch);
  launch.set_synchronous(true);
  proto::OpReply reply;
  OPENREG_CHECK(LaunchOpSync(launch, &reply, CurrentStreamId(device)));
  return KernelWarnings(reply);
}

proto::OpReply LaunchSync(const c10::OperatorHandle& op,
                          c10::ArrayRef<c10::IValue> arguments,
                          c10::DeviceIndex device) {
  if (SyncDebugEnabled()) {
    WarnOrErrorOnSyncSlow(
        c10::toString(op.operator_name()) +
        " (its result's shape depends on the data, or it has no Meta "
        "kernel: the daemon runs it before the call returns)");
  }
  proto::LaunchOp launch;
  EncodeLaunch(op, arguments, device, &launch);
  launch.set_synchronous(true);
  proto::OpReply reply;
  OPENREG_CHECK(LaunchOpSync(launch, &reply, CurrentStreamId(device)));
  return reply;
}

void CopyHostToDevice(void* device_dst, const void* host_src, size_t nbytes,
                      c10::DeviceIndex device) {
  if (nbytes == 0) return;
  OPENREG_CHECK(MemcpyAsync(device_dst, host_src, nbytes,
                            MemcpyKind::kHostToDevice,
                            CurrentStreamId(device)));
}

void CopyDeviceToHost(void* host_dst, const void* device_src, size_t nbytes,
                      c10::DeviceIndex device) {
  if (nbytes == 0) return;
  WarnOrErrorOnSync(
      "a copy from the device to the host (.item(), .cpu(), .tolist(), "
      "copy_ to a CPU tensor)");
  const StreamId stream = CurrentStreamId(device);
  OPENREG_CHECK(MemcpyAsync(host_dst, device_src, nbytes,
                            MemcpyKind::kDeviceToHost, stream));
  // Surfaces kernel errors (and warnings) recorded on the stream before
  // this copy.
  OPENREG_CHECK(StreamSynchronize(stream));
  RaisePendingKernelWarnings();
}

}  // namespace openreg::torch_backend
