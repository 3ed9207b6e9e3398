#include "device_daemon/kernels/launch_decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/_validate_sparse_coo_tensor_args.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/tensor_extent.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/kernels/launch_error.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

// Backing for tensors with no elements: a tensor wants a pointer, and an
// empty tensor's address need not point at any allocation.
alignas(64) char g_empty_tensor_storage[64];

bool SameTensorRef(const proto::TensorRef& a, const proto::TensorRef& b) {
  return a.address() == b.address() && a.dtype() == b.dtype() &&
         a.device() == b.device() && a.storage_offset() == b.storage_offset() &&
         a.conj() == b.conj() && a.neg() == b.neg() && !a.has_quantization() &&
         !b.has_quantization() &&
         std::equal(a.sizes().begin(), a.sizes().end(), b.sizes().begin(),
                    b.sizes().end()) &&
         std::equal(a.strides().begin(), a.strides().end(), b.strides().begin(),
                    b.strides().end());
}

}  // namespace

// A splitmix64-style mix, so that neighbouring offsets (successive ops) and
// neighbouring seeds give unrelated streams.
uint64_t EngineSeed(const proto::GeneratorState& state) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;
  return mix(state.seed() + kGoldenGamma * (mix(state.offset()) + 1));
}

absl::Status LaunchDecoder::CheckSparseIndices(const at::Tensor& indices,
                                               c10::IntArrayRef sizes) {
  // ATen's check with stand-in values of shape [nnz] against the sparse
  // dims only: the codec has checked the shapes, this checks the indices.
  const int64_t sparse_dim = indices.size(0);
  try {
    at::_validate_sparse_coo_tensor_args(
        indices, at::empty({indices.size(1)}, at::kByte),
        sizes.slice(0, sparse_dim), /*is_coalesced=*/std::nullopt);
  } catch (const c10::Error& error) {
    return LaunchError(
        op_, proto::INVALID_VALUE,
        absl::StrCat("sparse tensor: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> LaunchDecoder::DeviceTensor(
    const proto::TensorRef& ref, bool growable) {
  if (replaying_) {
    if (const at::Tensor* kept = decoded_->FindTensor(&ref, growable)) {
      return *kept;
    }
    // Not decoded when recorded: decoded (checked, pinned) now.
  }
  absl::StatusOr<at::Tensor> tensor = DecodeDeviceTensor(ref, growable);
  if (tensor.ok() && decoded_ != nullptr && !replaying_) {
    decoded_->KeepTensor(&ref, growable, *tensor);
  }
  return tensor;
}

absl::StatusOr<at::Tensor> LaunchDecoder::DecodeTensorRef(
    const proto::TensorRef& ref) {
  absl::StatusOr<at::Tensor> tensor = DeviceTensor(ref);
  if (tensor.ok() && decoded_ == nullptr) {
    arguments_.push_back({&ref, *tensor, tensor->data_ptr()});
  }
  return tensor;
}

const at::Tensor* LaunchDecoder::UnchangedArgument(
    const proto::TensorRef& ref) const {
  // In-place and out= ops name a few tensors; a launch of long lists (a
  // functional foreach op's) would pay outputs x arguments comparisons.
  if (arguments_.size() > kMostArgumentsSearched) return nullptr;
  for (const DecodedArgument& argument : arguments_) {
    if (!SameTensorRef(*argument.ref, ref)) continue;
    const at::Tensor& tensor = argument.tensor;
    if (tensor.data_ptr() == argument.data &&
        tensor.storage_offset() == ref.storage_offset() &&
        tensor.sizes() ==
            c10::IntArrayRef(ref.sizes().data(), ref.sizes_size()) &&
        tensor.strides() ==
            c10::IntArrayRef(ref.strides().data(), ref.strides_size())) {
      return &tensor;
    }
  }
  return nullptr;
}

const at::Tensor* LaunchDecoder::ArgumentTensor(
    const proto::TensorRef* ref) const {
  for (const DecodedArgument& argument : arguments_) {
    if (argument.ref == ref) return &argument.tensor;
  }
  return nullptr;
}

absl::StatusOr<at::Tensor> LaunchDecoder::OutputTensor(
    const proto::TensorRef& ref) {
  if (const at::Tensor* argument = UnchangedArgument(ref)) return *argument;
  return DeviceTensor(ref);
}

absl::StatusOr<at::Tensor> LaunchDecoder::DecodeDeviceTensor(
    const proto::TensorRef& ref, bool growable) {
  TensorExtent extent;
  absl::StatusOr<PinnedRange> pinned = session_.PinTensor(ref, &extent);
  if (!pinned.ok()) return pinned.status();
  // The storage keeps the allocation pinned for as long as ATen holds the
  // tensor (also when an op returns a view of it). Built directly rather
  // than with at::from_blob: this is the per-tensor cost of every launch.
  if (pinned->data == nullptr) {  // no elements: no memory, no aliasing
    c10::DataPtr data_ptr(g_empty_tensor_storage, c10::Device(c10::kCPU));
    c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                         std::move(data_ptr),
                         growable ? c10::GetCPUAllocator() : nullptr,
                         /*resizable=*/growable);
    return op_codec::TensorOverStorage(std::move(storage),
                                       c10::DispatchKey::CPU, ref);
  }
  // The client's view exactly: the storage starts where the client's
  // storage starts (ref.storage_offset() elements before the tensor), and
  // the tensors of one client storage share a pin whose deleter is
  // c10::refcounted_deleter, so Storage::is_alias_of holds between them.
  // ATen's overlap checks (an out= that partly overlaps an input:
  // "unsupported operation"), its same-memory shortcuts (copy_ of a tensor
  // onto itself) and storage-relative arguments then mean what they mean
  // in the client. A storage ends where the tensor ends: a kernel that
  // grows its out= moves it to daemon memory instead of writing past it.
  const int64_t itemsize = static_cast<int64_t>(
      c10::elementSize(static_cast<at::ScalarType>(ref.dtype())));
  const int64_t room = pinned->data - pinned->buffer->data();
  if (ref.storage_offset() > room / itemsize) {
    return LaunchError(
        op_, proto::INVALID_VALUE,
        absl::StrCat("a tensor at storage offset ", ref.storage_offset(),
                     " starts its storage before its allocation (",
                     room / itemsize, " elements before it at most)"));
  }
  const int64_t offset_bytes = ref.storage_offset() * itemsize;
  char* const storage_start = pinned->data - offset_bytes;
  c10::DataPtr data_ptr(storage_start,
                        SharedPin(storage_start, std::move(pinned->buffer)),
                        &c10::refcounted_deleter, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(),
                       static_cast<size_t>(offset_bytes) + extent.span_bytes,
                       std::move(data_ptr),
                       growable ? c10::GetCPUAllocator() : nullptr,
                       /*resizable=*/growable);
  at::Tensor tensor = op_codec::TensorOverStorage(std::move(storage),
                                                  c10::DispatchKey::CPU, ref);
  tensor.unsafeGetTensorImpl()->set_storage_offset(ref.storage_offset());
  return tensor;
}

LaunchDecoder::~LaunchDecoder() {
  for (const auto& [buffer, pin] : pins_) {
    if (decoded_ != nullptr && !replaying_) decoded_->KeepPin(pin);
    c10::refcounted_deleter(pin);
  }
}

c10::RefcountedDeleterContext* LaunchDecoder::SharedPin(
    const char* storage_start, std::shared_ptr<DeviceBuffer> buffer) {
  for (const auto& [start, pin] : pins_) {
    if (start == storage_start) {
      pin->refcount.fetch_add(1, std::memory_order_relaxed);
      return pin;
    }
  }
  auto* pin = new c10::RefcountedDeleterContext(
      new std::shared_ptr<DeviceBuffer>(std::move(buffer)), [](void* held) {
        delete static_cast<std::shared_ptr<DeviceBuffer>*>(held);
      });
  // One reference for the decoder (dropped by its destructor), one for
  // the caller's DataPtr.
  pin->refcount.fetch_add(1, std::memory_order_relaxed);
  pins_.emplace_back(storage_start, pin);
  return pin;
}

absl::StatusOr<c10::Device> LaunchDecoder::DecodeDevice(int32_t index) {
  if (!session_.devices().IsValid(index)) {
    return MakeError(
        proto::INVALID_DEVICE,
        absl::StrCat("names device ", index, " but the daemon has ",
                     session_.devices().count()));
  }
  return c10::Device(c10::kCPU);
}

absl::StatusOr<c10::IValue> LaunchDecoder::DecodeGenerator(
    const proto::GeneratorState& state) {
  return c10::IValue(
      at::make_generator<at::CPUGeneratorImpl>(EngineSeed(state)));
}

absl::StatusOr<torch::jit::Stack> LaunchDecoder::BuildStack(
    const c10::FunctionSchema& schema) {
  if (replaying_) return decoded_->stack();
  const std::vector<c10::Argument>& parameters = schema.arguments();
  if (static_cast<size_t>(op_.arguments_size()) > parameters.size()) {
    return LaunchError(
        op_, proto::INVALID_VALUE,
        absl::StrCat("got ", op_.arguments_size(),
                     " arguments, the schema takes ", parameters.size()));
  }
  torch::jit::Stack stack;
  stack.reserve(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (i < static_cast<size_t>(op_.arguments_size())) {
      absl::StatusOr<c10::IValue> value = op_codec::DecodeValue(
          op_.arguments(static_cast<int>(i)), &parameters[i], *this);
      if (!value.ok()) return LaunchError(op_, value.status());
      stack.push_back(*std::move(value));
    } else if (parameters[i].default_value().has_value()) {
      stack.push_back(*parameters[i].default_value());
    } else {
      return LaunchError(
          op_, proto::INVALID_VALUE,
          absl::StrCat("missing argument '", parameters[i].name(), "'"));
    }
  }
  if (decoded_ != nullptr) decoded_->KeepStack(stack);
  return stack;
}

absl::Status LaunchDecoder::ValidateOutputs() const {
  if (replaying_) return absl::OkStatus();  // checked when recorded
  for (const proto::TensorRef& output : op_.outputs()) {
    // Named by an argument: checked with it.
    if (UnchangedArgument(output) != nullptr) continue;
    absl::Status valid = op_codec::CheckTensorRef(output);
    if (valid.ok()) valid = session_.ValidateTensor(output).status();
    if (!valid.ok()) {
      return LaunchError(op_, ErrorCodeOf(valid),
                         absl::StrCat("output: ", valid.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status LaunchDecoder::EncodeTensor(const at::Tensor& /*tensor*/,
                                         proto::Argument* /*out*/) {
  return MakeError(proto::INTERNAL, "the launch decoder encodes no results");
}

}  // namespace openreg::daemon
