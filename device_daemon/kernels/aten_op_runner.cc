// With op_table.cc, the only ATen-heavy translation unit of the daemon
// (compiling ATen headers is slow): everything that touches at::Tensor or
// c10::IValue is here. Arguments and results go through the one op codec
// (op_codec/op_codec.h); a Launch is the daemon's side of it for one op.
#include "device_daemon/kernels/aten_op_runner.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_validate_sparse_coo_tensor_args.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data_plane/tensor_extent.h"
#include "data_plane/warning_mailbox.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/op_table.h"
#include "device_daemon/kernels/warn_once_probe.h"
#include "device_daemon/sessions/session.h"
#include "op_codec/kernel_settings.h"
#include "op_codec/op_codec.h"

namespace openreg::daemon {
namespace {

// Backing for tensors with no elements: a tensor wants a pointer, and an
// empty tensor's address need not point at any allocation.
alignas(64) char g_empty_tensor_storage[64];

// The seed of the CPU engine one random op runs with, from the client
// generator's (seed, offset): a splitmix64-style mix, so that neighbouring
// offsets (successive ops) and neighbouring seeds give unrelated streams.
uint64_t EngineSeed(const proto::GeneratorState& state) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;
  return mix(state.seed() + kGoldenGamma * (mix(state.offset()) + 1));
}

// Serializes the ops that borrow the daemon's CPU default generator (random
// ops without a Generator parameter): each reseeds it, runs, and must not
// interleave with another.
std::mutex g_default_generator_mutex;

std::string ShapeString(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}
// Collects the warnings a kernel raises on this thread (c10's warning
// handler is thread-local), for the client to raise again; each is encoded
// at once, while warn_once_probe.h can still tell a TORCH_WARN_ONCE.
class WarningCollector : public c10::WarningHandler {
 public:
  WarningCollector() { TakeWarnOnceMark(); }  // a stale mark is not ours
  void process(const c10::Warning& warning) override;
  const std::vector<proto::KernelWarning>& warnings() const {
    return warnings_;
  }

 private:
  std::vector<proto::KernelWarning> warnings_;
};

// Passes warnings on to the handler that was current, except ATen's
// "output ... was resized" warning: an op the client called without out=
// and the daemon runs as its out= overload may resize the output on the
// way (mse_loss.out with a reduction), which the functional op never warns
// about on CPU.
class OutVariantWarningFilter : public c10::WarningHandler {
 public:
  OutVariantWarningFilter() : next_(c10::WarningUtils::get_warning_handler()) {}
  void process(const c10::Warning& warning) override {
    if (absl::StartsWith(warning.msg(),
                         "An output with one or more elements was resized")) {
      TakeWarnOnceMark();
      return;
    }
    next_->process(warning);
  }

 private:
  c10::WarningHandler* const next_;
};

void EncodeWarning(const c10::Warning& warning, proto::KernelWarning* out) {
  out->set_message(warning.msg());
  out->set_once(TakeWarnOnceMark());
  out->set_deprecation(
      std::holds_alternative<c10::DeprecationWarning>(warning.type()));
  const c10::SourceLocation& where = warning.source_location();
  if (where.function != nullptr) out->set_function(where.function);
  if (where.file != nullptr) out->set_file(where.file);
  out->set_line(where.line);
}

void WarningCollector::process(const c10::Warning& warning) {
  EncodeWarning(warning, &warnings_.emplace_back());
}

// Everything one launch needs while its arguments are converted: the
// daemon's side of the op codec (device tensors are CPU tensors over
// pinned session memory; results are stored in memory allocated in the
// session) and the steps of running the op.
class Launch : public op_codec::DeviceTensorCodec {
 public:
  Launch(const StreamContext& context, const proto::LaunchOp& op)
      : context_(context), session_(*context.session), op_(op) {}

  // On success, `written` (if not null) gets the tensors the kernel wrote.
  absl::Status Run(uint64_t sequence, WrittenTensors* written);
  // Frees the synchronous results allocated so far (after a failure).
  void ReleaseResults();
  // "aten::add.Tensor"; built on demand (error paths only).
  std::string op_name() const {
    return op_.overload().empty()
               ? op_.name()
               : absl::StrCat(op_.name(), ".", op_.overload());
  }

  // op_codec::DeviceTensorCodec:
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override;
  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override {
    return DeviceTensor(ref);
  }
  // Ops run on the CPU inside the daemon, whatever device they target.
  absl::StatusOr<c10::Device> DecodeDevice(int32_t index) override;
  // Sparse kernels index memory with these values: ATen's own check
  // (every index within its dim's size) before any kernel sees them.
  absl::Status CheckSparseIndices(const at::Tensor& indices,
                                  c10::IntArrayRef sizes) override;
  absl::StatusOr<c10::IValue> DecodeGenerator(
      const proto::GeneratorState& state) override;

 private:
  absl::Status Fail(proto::ErrorCode code, absl::string_view what) const {
    return MakeError(code, absl::StrCat(op_name(), ": ", what));
  }
  // The same error, with the op's name in front.
  absl::Status Fail(const absl::Status& status) const {
    return Fail(ErrorCodeOf(status), status.message());
  }

  // Resolves, decodes and runs the op (Run without the bookkeeping).
  absl::Status RunKernel(uint64_t sequence);
  void CollectWritten(const c10::FunctionSchema& schema,
                      WrittenTensors* written) const;
  // The steps of Run, in order.
  absl::StatusOr<const ResolvedOp*> Resolve() const;
  absl::StatusOr<torch::jit::Stack> BuildStack(
      const c10::FunctionSchema& schema);
  // Outputs are checked before the kernel runs so that a bad TensorRef
  // fails the launch without side effects.
  absl::Status ValidateOutputs() const;
  absl::Status RunAsynchronous(const ResolvedOp& resolved,
                               torch::jit::Stack* stack);
  absl::Status RunSynchronous(const c10::OperatorHandle& handle,
                              torch::jit::Stack* stack, uint64_t sequence);
  // Leaves the warnings of an asynchronous kernel in the stream's mailbox.
  void PostWarnings(const std::vector<proto::KernelWarning>& warnings);
  // An asynchronous launch the client waits for: the reply carries the
  // kernel's warnings only.
  absl::Status RunChecked(const ResolvedOp& resolved, torch::jit::Stack* stack,
                          uint64_t sequence);

  // A CPU tensor over the session memory `ref` names (extent validated,
  // memory pinned). Its dtype and bits were checked by op_codec::
  // CheckTensorRef (DecodeValue for arguments, ValidateOutputs for
  // outputs). A `growable` tensor's storage may be resized by the kernel: the
  // data then moves to daemon heap memory (see RunOutVariant).
  absl::StatusOr<at::Tensor> DeviceTensor(const proto::TensorRef& ref,
                                          bool growable = false);
  // The device that owns synchronous results: the first device tensor
  // argument's, else the first Device argument's, else the stream's.
  int ResultDevice() const;

  absl::Status CopyToOutputs(const torch::jit::Stack& stack);
  // Runs a structured op's out= overload on `stack` (the functional
  // arguments) followed by the launch's outputs: the kernel writes the
  // results in place. Client outputs are sized by the Meta kernel, which
  // for structured ops is the out= kernel's own shape logic, so no
  // growable stand-ins are needed (a resize would fail the launch).
  absl::Status RunOutVariant(const c10::OperatorHandle& out_variant,
                             torch::jit::Stack* stack);
  // Calls the kernel; ops that borrow the daemon's CPU default generator
  // get it seeded from the launch's draw, under its lock.
  void Call(const c10::OperatorHandle& handle, torch::jit::Stack* stack);
  // Gives the kernel growable stand-ins for the out= arguments.
  void ReplaceOutArguments(const c10::FunctionSchema& schema,
                           torch::jit::Stack* stack);
  // Copies stand-ins that kept their shape back into client memory.
  void FinishOutArguments();
  absl::Status WriteReply(const c10::FunctionSchema& schema,
                          const torch::jit::Stack& stack,
                          const std::vector<proto::KernelWarning>& warnings,
                          uint64_t sequence);

  const StreamContext& context_;
  Session& session_;
  const proto::LaunchOp& op_;
  const ResolvedOp* resolved_ = nullptr;  // set once the op is looked up
  // Tensors a synchronous launch returned in memory it allocated.
  std::vector<proto::TensorRef> reply_tensors_;
  // Synchronous results allocated so far; freed again if the launch fails.
  std::vector<uint64_t> result_addresses_;
  // out= arguments: the client's tensor and the stand-in the kernel wrote
  // (and maybe resized or moved), by argument index.
  struct OutArgument {
    at::Tensor client;
    at::Tensor stand_in;
  };
  std::vector<std::pair<size_t, OutArgument>> out_arguments_;
};

absl::Status Launch::CheckSparseIndices(const at::Tensor& indices,
                                        c10::IntArrayRef sizes) {
  // ATen's check with stand-in values of shape [nnz] against the sparse
  // dims only: the codec has checked the shapes, this checks the indices.
  const int64_t sparse_dim = indices.size(0);
  try {
    at::_validate_sparse_coo_tensor_args(
        indices, at::empty({indices.size(1)}, at::kByte),
        sizes.slice(0, sparse_dim), /*is_coalesced=*/std::nullopt);
  } catch (const c10::Error& error) {
    return Fail(
        proto::INVALID_VALUE,
        absl::StrCat("sparse tensor: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Launch::DeviceTensor(const proto::TensorRef& ref,
                                                bool growable) {
  TensorExtent extent;
  absl::StatusOr<PinnedRange> pinned = session_.PinTensor(ref, &extent);
  if (!pinned.ok()) return pinned.status();
  void* data = pinned->data != nullptr ? pinned->data : g_empty_tensor_storage;
  // The storage keeps the allocation pinned for as long as ATen holds the
  // tensor (also when an op returns a view of it). Built directly rather
  // than with at::from_blob: this is the per-tensor cost of every launch.
  auto* pin = new std::shared_ptr<DeviceBuffer>(std::move(pinned->buffer));
  c10::DataPtr data_ptr(
      data, pin,
      [](void* context) {
        delete static_cast<std::shared_ptr<DeviceBuffer>*>(context);
      },
      c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), extent.span_bytes,
                       std::move(data_ptr),
                       growable ? c10::GetCPUAllocator() : nullptr,
                       /*resizable=*/growable);
  return op_codec::TensorOverStorage(std::move(storage), c10::DispatchKey::CPU,
                                     ref);
}
absl::StatusOr<c10::Device> Launch::DecodeDevice(int32_t index) {
  if (!session_.devices().IsValid(index)) {
    return MakeError(
        proto::INVALID_DEVICE,
        absl::StrCat("names device ", index, " but the daemon has ",
                     session_.devices().count()));
  }
  return c10::Device(c10::kCPU);
}

absl::StatusOr<c10::IValue> Launch::DecodeGenerator(
    const proto::GeneratorState& state) {
  return c10::IValue(
      at::make_generator<at::CPUGeneratorImpl>(EngineSeed(state)));
}

absl::StatusOr<torch::jit::Stack> Launch::BuildStack(
    const c10::FunctionSchema& schema) {
  const std::vector<c10::Argument>& parameters = schema.arguments();
  if (static_cast<size_t>(op_.arguments_size()) > parameters.size()) {
    return Fail(
        proto::INVALID_VALUE,
        absl::StrCat("got ", op_.arguments_size(),
                     " arguments, the schema takes ", parameters.size()));
  }
  torch::jit::Stack stack;
  stack.reserve(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (i < static_cast<size_t>(op_.arguments_size())) {
      absl::StatusOr<c10::IValue> value = op_codec::DecodeValue(
          op_.arguments(static_cast<int>(i)), &parameters[i], *this);
      if (!value.ok()) return Fail(value.status());
      stack.push_back(*std::move(value));
    } else if (parameters[i].default_value().has_value()) {
      stack.push_back(*parameters[i].default_value());
    } else {
      return Fail(
          proto::INVALID_VALUE,
          absl::StrCat("missing argument '", parameters[i].name(), "'"));
    }
  }
  return stack;
}
int Launch::ResultDevice() const {
  for (const proto::Argument& argument : op_.arguments()) {
    if (argument.has_tensor()) return argument.tensor().device();
  }
  for (const proto::Argument& argument : op_.arguments()) {
    if (argument.value_case() == proto::Argument::kDevice) {
      return argument.device();
    }
  }
  return context_.device;
}
// [first byte, one past the last byte] of a strided tensor's elements.
std::pair<const char*, const char*> ByteRange(const at::Tensor& tensor) {
  const char* begin = static_cast<const char*>(tensor.data_ptr());
  return {begin, begin + StridedSpanElements(tensor.sizes(), tensor.strides()) *
                             tensor.element_size()};
}

absl::Status Launch::CopyToOutputs(const torch::jit::Stack& stack) {
  // Flatten the returned tensors: Tensor returns count once, Tensor[]
  // returns once per element.
  std::vector<at::Tensor> produced;
  for (const c10::IValue& value : stack) {
    if (value.isTensor()) {
      produced.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorVector()) {
        produced.push_back(tensor);
      }
    } else if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        produced.push_back(element.isTensor() ? element.toTensor()
                                              : at::Tensor());
      }
    }
  }
  // The client names no output where the Meta kernel returned an undefined
  // tensor (an output_mask-disabled gradient): the kernel returns none there
  // too.
  produced.erase(std::remove_if(produced.begin(), produced.end(),
                                [](const at::Tensor& tensor) {
                                  return !tensor.defined();
                                }),
                 produced.end());
  if (produced.size() != static_cast<size_t>(op_.outputs_size())) {
    return Fail(proto::INVALID_VALUE,
                absl::StrCat("the op returned ", produced.size(),
                             " tensors but the launch has ", op_.outputs_size(),
                             " outputs"));
  }
  for (int i = 0; i < op_.outputs_size(); ++i) {
    const at::Tensor& result = produced[i];
    if (!result.defined()) continue;  // e.g. an output-mask-disabled grad
    absl::StatusOr<at::Tensor> destination = DeviceTensor(op_.outputs(i));
    if (!destination.ok()) return destination.status();
    at::Tensor& output = *destination;
    if ((result.numel() == 0) != (output.numel() == 0)) {
      // Placeholders for results nobody reads (batch norm statistics in
      // eval mode, _embedding_bag_forward_only's buffers) are empty on one
      // side and full-size on the other: the Meta kernel's shape (CUDA's)
      // wins, filled with zeros, never stale memory.
      if (output.numel() != 0) output.zero_();
      continue;
    }
    if (output.sizes() != result.sizes()) {
      return Fail(
          proto::KERNEL_FAILURE,
          absl::StrCat("output ", i, " has shape ", ShapeString(output.sizes()),
                       " but the kernel produced ",
                       ShapeString(result.sizes())));
    }
    if (result.numel() == 0) continue;
    const auto [out_begin, out_end] = ByteRange(output);
    const auto [in_begin, in_end] = ByteRange(result);
    if (out_begin == in_begin && output.strides() == result.strides() &&
        output.scalar_type() == result.scalar_type()) {
      continue;  // in-place or out= op: already there
    }
    if (out_begin < in_end && in_begin < out_end) {
      output.copy_(result.clone());  // overlapping memory
    } else {
      output.copy_(result);
    }
  }
  return absl::OkStatus();
}

void Launch::Call(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  if (!op_.has_default_generator()) {
    handle.callBoxed(stack);
    return;
  }
  std::lock_guard<std::mutex> lock(g_default_generator_mutex);
  at::Generator cpu_default = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> seed_lock(cpu_default.mutex());
    cpu_default.set_current_seed(EngineSeed(op_.default_generator()));
  }
  handle.callBoxed(stack);
}

absl::Status Launch::RunOutVariant(const c10::OperatorHandle& out_variant,
                                   torch::jit::Stack* stack) {
  // Some out= kernels resize their output on the way (mse_loss.out with a
  // reduction first writes the elementwise loss into it): the outputs are
  // growable, and one whose memory moved is copied back below.
  std::vector<const void*> client_memory;
  client_memory.reserve(op_.outputs_size());
  for (const proto::TensorRef& output : op_.outputs()) {
    absl::StatusOr<at::Tensor> tensor = DeviceTensor(output, /*growable=*/true);
    if (!tensor.ok()) return tensor.status();
    client_memory.push_back(tensor->data_ptr());
    stack->push_back(*std::move(tensor));
  }
  {
    OutVariantWarningFilter filter;
    const c10::WarningUtils::WarningHandlerGuard guard(&filter);
    Call(out_variant, stack);
  }
  if (stack->size() != client_memory.size()) {
    return Fail(proto::INTERNAL,
                absl::StrCat("the out= overload returned ", stack->size(),
                             " values for ", client_memory.size(), " outputs"));
  }
  for (size_t i = 0; i < client_memory.size(); ++i) {
    const at::Tensor& result = (*stack)[i].toTensor();
    const proto::TensorRef& ref = op_.outputs(static_cast<int>(i));
    if (result.data_ptr() == client_memory[i] &&
        result.sizes() ==
            c10::IntArrayRef(ref.sizes().data(), ref.sizes_size()) &&
        result.strides() ==
            c10::IntArrayRef(ref.strides().data(), ref.strides_size())) {
      continue;  // written in place
    }
    absl::StatusOr<at::Tensor> destination = DeviceTensor(ref);
    if (!destination.ok()) return destination.status();
    if (destination->sizes() != result.sizes()) {
      return Fail(proto::KERNEL_FAILURE,
                  absl::StrCat("output ", i, " has shape ",
                               ShapeString(destination->sizes()),
                               " but the kernel produced ",
                               ShapeString(result.sizes())));
    }
    destination->copy_(result);
  }
  return absl::OkStatus();
}
absl::Status Launch::EncodeTensor(const at::Tensor& tensor,
                                  proto::Argument* out) {
  // (WriteReply names the op in front of these errors.)
  if (tensor.layout() != c10::kStrided) {
    return MakeError(proto::KERNEL_FAILURE,
                     "the op returned a non-strided tensor");
  }
  const int device = ResultDevice();
  if (tensor.is_quantized() && tensor.qscheme() != at::kPerTensorAffine) {
    return MakeError(proto::KERNEL_NOT_IMPLEMENTED_ERROR,
                     absl::StrCat("openreg supports per-tensor affine "
                                  "quantized tensors only, not ",
                                  c10::toString(tensor.qscheme())));
  }
  // Kernels may return lazily conjugated / negated views (linalg_lu_solve
  // with left=false): the client's tensor carries plain values.
  const at::Tensor contiguous =
      tensor.resolve_conj().resolve_neg().contiguous();
  const uint64_t bytes = contiguous.nbytes();
  absl::StatusOr<uint64_t> address = session_.Allocate(device, bytes);
  if (!address.ok()) return address.status();
  result_addresses_.push_back(*address);
  absl::StatusOr<PinnedRange> destination = session_.PinRange(*address, bytes);
  if (!destination.ok()) return destination.status();
  if (bytes != 0) std::memcpy(destination->data, contiguous.data_ptr(), bytes);

  proto::TensorRef* ref = out->mutable_tensor();
  ref->set_address(*address);
  ref->set_dtype(static_cast<int32_t>(tensor.scalar_type()));
  ref->set_device(device);
  if (tensor.is_quantized()) {
    ref->mutable_quantization()->set_scale(tensor.q_scale());
    ref->mutable_quantization()->set_zero_point(tensor.q_zero_point());
  }
  // Row-major strides of the copy (size-1 and size-0 dims step by 1).
  int64_t stride = 1;
  std::vector<int64_t> strides(tensor.dim());
  for (int64_t dim = tensor.dim() - 1; dim >= 0; --dim) {
    strides[dim] = stride;
    stride *= std::max<int64_t>(tensor.size(dim), 1);
  }
  for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
    ref->add_sizes(tensor.size(dim));
    ref->add_strides(strides[dim]);
  }
  return absl::OkStatus();
}
// Some out= kernels resize their output on the way (mse_loss.out with a
// reduction first writes the elementwise loss into it) or get a wrongly
// sized one, and client memory cannot grow. The kernel gets an alias of the
// client's memory whose storage may grow: a resize beyond it moves the
// data to daemon memory, and FinishOutArguments (or CopyToOutputs, for
// asynchronous launches) copies it back or hands it to the client.
void Launch::ReplaceOutArguments(const c10::FunctionSchema& schema,
                                 torch::jit::Stack* stack) {
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (!schema.arguments()[i].is_out() || !(*stack)[i].isTensor()) continue;
    const at::Tensor client = (*stack)[i].toTensor();
    // A sparse out= is rebuilt by its kernel and returned (WriteReply).
    if (!client.defined() || client.layout() != at::kStrided) continue;
    const c10::Storage& storage = client.storage();
    // The alias keeps the client tensor, and so its pin, alive.
    auto* keep_alive = new at::Tensor(client);
    c10::DataPtr data(
        storage.mutable_data(), keep_alive,
        [](void* context) { delete static_cast<at::Tensor*>(context); },
        c10::Device(c10::kCPU));
    c10::Storage growable(c10::Storage::use_byte_size_t(), storage.nbytes(),
                          std::move(data), c10::GetCPUAllocator(),
                          /*resizable=*/true);
    at::Tensor stand_in = at::empty({0}, client.options())
                              .set_(growable, client.storage_offset(),
                                    client.sizes(), client.strides());
    (*stack)[i] = stand_in;
    out_arguments_.push_back({i, OutArgument{client, stand_in}});
  }
}

void Launch::FinishOutArguments() {
  for (auto& [index, out] : out_arguments_) {
    const bool same_shape = out.stand_in.sizes() == out.client.sizes();
    if (same_shape && out.stand_in.data_ptr() == out.client.data_ptr() &&
        out.stand_in.strides() == out.client.strides()) {
      out.stand_in = at::Tensor();  // written in place: nothing to reply
    } else if (same_shape) {
      out.client.copy_(out.stand_in);
      out.stand_in = at::Tensor();
    }
    // Otherwise the reply carries the stand-in for the client to adopt.
  }
}

absl::Status Launch::WriteReply(
    const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
    const std::vector<proto::KernelWarning>& warnings, uint64_t sequence) {
  const std::vector<c10::Argument>& returns = schema.returns();
  proto::OpReply reply;
  for (size_t i = 0; i < stack.size(); ++i) {
    const c10::TypePtr type =
        i < returns.size() ? returns[i].type() : c10::AnyType::get();
    const c10::AliasInfo* alias =
        i < returns.size() ? returns[i].alias_info() : nullptr;
    if (alias != nullptr && alias->isWrite() && stack[i].isTensor() &&
        stack[i].toTensor().layout() == at::kSparse) {
      // A sparse tensor written in place has new indices and values (its
      // number of non-zeros may change): the client adopts them.
      absl::Status encoded =
          op_codec::EncodeValue(stack[i], type, *this, reply.add_results());
      if (!encoded.ok()) return Fail(encoded);
      continue;
    }
    if (alias != nullptr && alias->isWrite()) {
      // The client returns its own argument (the kernel wrote through its
      // memory): no copy, except an out= stand-in that the kernel resized,
      // which the client adopts.
      proto::Argument* result = reply.add_results();
      result->set_none(true);
      for (const auto& [index, out] : out_arguments_) {
        const c10::AliasInfo* written = schema.arguments()[index].alias_info();
        if (out.stand_in.defined() &&
            written->beforeSets() == alias->beforeSets()) {
          absl::Status stored = EncodeTensor(out.stand_in, result);
          if (!stored.ok()) return stored;
        }
      }
      continue;
    }
    absl::Status encoded =
        op_codec::EncodeValue(stack[i], type, *this, reply.add_results());
    if (!encoded.ok()) return Fail(encoded);
  }
  for (const proto::KernelWarning& warning : warnings) {
    *reply.add_warnings() = warning;
  }
  for (const proto::Argument& result : reply.results()) {
    if (result.has_tensor()) reply_tensors_.push_back(result.tensor());
  }
  const size_t size = reply.ByteSizeLong();
  const uint64_t limit = session_.limits().reply_bytes;
  if (size > limit) {
    return Fail(proto::INVALID_VALUE,
                absl::StrCat("reply of ", size,
                             " bytes exceeds the stream's reply area of ",
                             limit, " bytes"));
  }
  char* area = session_.reply_area(context_.slot_index);
  if (!reply.SerializeToArray(area, static_cast<int>(size))) {
    return Fail(proto::INTERNAL, "cannot serialize the reply");
  }
  // Published by the completion counter, which advances after this.
  context_.slot->reply_size = size;
  context_.slot->reply_sequence = sequence;
  return absl::OkStatus();
}
absl::StatusOr<const ResolvedOp*> Launch::Resolve() const {
  const ResolvedOp* resolved = ResolveOp(op_.name(), op_.overload());
  if (resolved == nullptr) {
    // Like an op without a kernel for a backend: NotImplementedError.
    return MakeError(
        proto::KERNEL_NOT_IMPLEMENTED_ERROR,
        absl::StrCat("unknown operator ", op_name(),
                     ": the daemon has no kernel for it (load the library "
                     "that defines it with --kernel_library)"));
  }
  return resolved;
}

absl::Status Launch::ValidateOutputs() const {
  for (const proto::TensorRef& output : op_.outputs()) {
    absl::Status valid = op_codec::CheckTensorRef(output);
    if (valid.ok()) valid = session_.ValidateTensor(output).status();
    if (!valid.ok()) {
      return Fail(ErrorCodeOf(valid),
                  absl::StrCat("output: ", valid.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Launch::RunAsynchronous(const ResolvedOp& resolved,
                                     torch::jit::Stack* stack) {
  if (resolved.out_variant.has_value() &&
      static_cast<size_t>(op_.outputs_size()) ==
          resolved.handle.schema().returns().size()) {
    return RunOutVariant(*resolved.out_variant, stack);
  }
  ReplaceOutArguments(resolved.handle.schema(), stack);
  Call(resolved.handle, stack);
  return CopyToOutputs(*stack);
}

void Launch::PostWarnings(const std::vector<proto::KernelWarning>& warnings) {
  for (const proto::KernelWarning& warning : warnings) {
    PostToMailbox(context_.slot->warnings, warning.SerializeAsString());
  }
}

absl::Status Launch::RunChecked(const ResolvedOp& resolved,
                                torch::jit::Stack* stack, uint64_t sequence) {
  WarningCollector collector;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&collector);
    absl::Status ran = RunAsynchronous(resolved, stack);
    if (!ran.ok()) return ran;
  }
  return WriteReply(resolved.handle.schema(), /*stack=*/{},
                    collector.warnings(), sequence);
}

absl::Status Launch::RunSynchronous(const c10::OperatorHandle& handle,
                                    torch::jit::Stack* stack,
                                    uint64_t sequence) {
  ReplaceOutArguments(handle.schema(), stack);
  // The client waits for this reply, so the kernel's warnings reach it at
  // the call, as they would on CPU.
  WarningCollector collector;
  {
    const c10::WarningUtils::WarningHandlerGuard guard(&collector);
    Call(handle, stack);
  }
  FinishOutArguments();
  return WriteReply(handle.schema(), *stack, collector.warnings(), sequence);
}

void Launch::CollectWritten(const c10::FunctionSchema& schema,
                            WrittenTensors* written) const {
  written->assign(op_.outputs().begin(), op_.outputs().end());
  if (!written->empty()) return;
  // A synchronous launch's results, in memory the daemon allocated.
  written->assign(reply_tensors_.begin(), reply_tensors_.end());
  if (!written->empty()) return;
  // In-place and out= kernels write through their (mutable) arguments.
  const std::vector<c10::Argument>& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite() &&
        i < static_cast<size_t>(op_.arguments_size()) &&
        op_.arguments(static_cast<int>(i)).has_tensor()) {
      written->push_back(op_.arguments(static_cast<int>(i)).tensor());
    }
  }
}

absl::Status Launch::Run(uint64_t sequence, WrittenTensors* written) {
  absl::Status ran = RunKernel(sequence);
  if (ran.ok() && written != nullptr && resolved_ != nullptr) {
    CollectWritten(resolved_->handle.schema(), written);
  }
  return ran;
}

absl::Status Launch::RunKernel(uint64_t sequence) {
  absl::StatusOr<const ResolvedOp*> resolved = Resolve();
  if (!resolved.ok()) return resolved.status();
  resolved_ = *resolved;
  absl::StatusOr<torch::jit::Stack> stack =
      BuildStack((*resolved)->handle.schema());
  if (!stack.ok()) return stack.status();
  if (absl::Status outputs = ValidateOutputs(); !outputs.ok()) return outputs;
  if (!op_.synchronous()) {
    // Warnings of an asynchronous kernel (value-dependent ones: the checked
    // first launch of the signature replied with the others) wait in the
    // stream's mailbox for the client's next synchronization.
    WarningCollector collector;
    absl::Status ran;
    {
      const c10::WarningUtils::WarningHandlerGuard guard(&collector);
      ran = RunAsynchronous(**resolved, &*stack);
    }
    PostWarnings(collector.warnings());
    return ran;
  }
  if (op_.outputs_size() == 0) {
    return RunSynchronous((*resolved)->handle, &*stack, sequence);
  }
  return RunChecked(**resolved, &*stack, sequence);
}

void Launch::ReleaseResults() {
  for (uint64_t address : result_addresses_) {
    session_.Free(address).IgnoreError();
  }
  result_addresses_.clear();
}
// c10's error classes keep their identity across the process boundary: the
// client raises the same Python class (the error table maps the codes).
proto::ErrorCode CodeOfKernelError(const c10::Error& error) {
  if (dynamic_cast<const c10::IndexError*>(&error) != nullptr) {
    return proto::KERNEL_INDEX_ERROR;
  }
  if (dynamic_cast<const c10::ValueError*>(&error) != nullptr) {
    return proto::KERNEL_VALUE_ERROR;
  }
  if (dynamic_cast<const c10::TypeError*>(&error) != nullptr) {
    return proto::KERNEL_TYPE_ERROR;
  }
  if (dynamic_cast<const c10::NotImplementedError*>(&error) != nullptr) {
    return proto::KERNEL_NOT_IMPLEMENTED_ERROR;
  }
  if (dynamic_cast<const c10::LinAlgError*>(&error) != nullptr) {
    return proto::KERNEL_LINALG_ERROR;
  }
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) {
    return proto::OUT_OF_MEMORY;
  }
  return proto::KERNEL_FAILURE;
}

}  // namespace

AtenOpRunner::AtenOpRunner(uint64_t workspace_limit_bytes)
    : workspace_limit_bytes_(workspace_limit_bytes) {
  c10::WarningUtils::set_warnAlways(true);
  KernelWorkspace::Install();
}

absl::Status AtenOpRunner::Run(const StreamContext& context,
                               const proto::LaunchOp& op, uint64_t sequence,
                               WrittenTensors* written) {
  // Intra-op parallelism is left at ATen's default (one thread per core),
  // shared by all stream workers: ATen's pool serializes nested parallel
  // regions, and with few cores more threads would only add contention.
  // Plain inference: no autograd bookkeeping for daemon-side tensors.
  c10::InferenceMode inference_mode;
  Launch launch(context, op);
  op_codec::KernelSettings settings;
  if (op.has_settings()) {
    absl::StatusOr<op_codec::KernelSettings> decoded =
        op_codec::DecodeKernelSettings(op.settings());
    if (!decoded.ok()) {
      return MakeError(proto::INVALID_VALUE,
                       absl::StrCat(launch.op_name(), ": settings: ",
                                    decoded.status().message()));
    }
    settings = *decoded;
  }
  const KernelSettingsGate::Pass pass = settings_gate_.Enter(settings);
  op_codec::ApplyThreadSettings(settings);
  absl::Status status;
  try {
    const KernelWorkspace::Scope workspace(workspace_limit_bytes_, op.name(),
                                           op.overload());
    status = launch.Run(sequence, written);
  } catch (const c10::Error& error) {
    // The kernel's own message, unchanged: the error record names the op,
    // and the client adds where and when it ran after the message.
    status =
        MakeError(CodeOfKernelError(error), error.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    status = KernelFailureError(absl::StrCat(
        launch.op_name(), " failed: out of host memory in the daemon"));
  } catch (const std::exception& error) {
    status = KernelFailureError(
        absl::StrCat(launch.op_name(), " failed: ", error.what()));
  } catch (...) {
    status = KernelFailureError(
        absl::StrCat(launch.op_name(), " failed with an unknown exception"));
  }
  if (!status.ok()) launch.ReleaseResults();
  return status;
}

}  // namespace openreg::daemon
