#include "device_daemon/kernels/launch_reply.h"

#include <ATen/core/jit_type.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/tensor_extent.h"
#include "data_plane/warning_mailbox.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/kernels/kernel_workspace.h"
#include "device_daemon/kernels/launch_error.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

// [first byte, one past the last byte] of a strided tensor's elements.
std::pair<const char*, const char*> ByteRange(const at::Tensor& tensor) {
  const char* begin = static_cast<const char*>(tensor.data_ptr());
  return {begin, begin + StridedSpanElements(tensor.sizes(), tensor.strides()) *
                             tensor.element_size()};
}

// `result` already is `output`: same first byte, strides and dtype (an
// in-place or out= kernel, or a result allocated in the output).
bool InPlace(const at::Tensor& output, const at::Tensor& result) {
  return output.data_ptr() == result.data_ptr() &&
         output.strides() == result.strides() &&
         output.scalar_type() == result.scalar_type();
}

}  // namespace

int LaunchReply::ResultDevice() const {
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

std::vector<at::Tensor> LaunchReply::ReturnedTensors(
    const torch::jit::Stack& stack) {
  // Tensor returns count once, Tensor[] returns once per element.
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
  return produced;
}

absl::Status LaunchReply::CopyToOutputs(std::vector<at::Tensor> produced) {
  if (produced.size() != static_cast<size_t>(op_.outputs_size())) {
    return LaunchError(op_, proto::INVALID_VALUE,
                       absl::StrCat("the op returned ", produced.size(),
                                    " tensors but the launch has ",
                                    op_.outputs_size(), " outputs"));
  }
  std::vector<at::Tensor> destinations;
  destinations.reserve(produced.size());
  for (int i = 0; i < op_.outputs_size(); ++i) {
    absl::StatusOr<at::Tensor> destination =
        decoder_.OutputTensor(op_.outputs(i));
    if (!destination.ok()) return destination.status();
    destinations.push_back(*std::move(destination));
  }
  // A result the kernel allocated in one of the outputs (a placement,
  // kernel_workspace.h) that is not exactly its own output would be
  // overwritten by the copies below: it moves out of the way first.
  for (size_t i = 0; i < produced.size(); ++i) {
    at::Tensor& result = produced[i];
    if (!result.defined() || result.numel() == 0 ||
        !KernelWorkspace::IsPlaced(result.storage().data())) {
      continue;
    }
    if (!InPlace(destinations[i], result)) result = result.clone();
  }
  for (int i = 0; i < op_.outputs_size(); ++i) {
    const at::Tensor& result = produced[i];
    if (!result.defined()) continue;  // e.g. an output-mask-disabled grad
    at::Tensor& output = destinations[i];
    if ((result.numel() == 0) != (output.numel() == 0)) {
      // Placeholders for results nobody reads (batch norm statistics in
      // eval mode, _embedding_bag_forward_only's buffers) are empty on one
      // side and full-size on the other: the Meta kernel's shape (CUDA's)
      // wins, filled with zeros, never stale memory.
      if (output.numel() != 0) output.zero_();
      continue;
    }
    if (output.sizes() != result.sizes()) {
      return LaunchError(
          op_, proto::KERNEL_FAILURE,
          absl::StrCat("output ", i, " has shape ", ShapeString(output.sizes()),
                       " but the kernel produced ",
                       ShapeString(result.sizes())));
    }
    if (result.numel() == 0) continue;
    if (InPlace(output, result)) continue;  // in place, out= or placed
    const auto [out_begin, out_end] = ByteRange(output);
    const auto [in_begin, in_end] = ByteRange(result);
    if (out_begin < in_end && in_begin < out_end) {
      output.copy_(result.clone());  // overlapping memory
    } else {
      output.copy_(result);
    }
  }
  return absl::OkStatus();
}

absl::Status LaunchReply::EncodeTensor(const at::Tensor& tensor,
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

absl::Status LaunchReply::WriteReply(
    const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
    const OutArguments& out_arguments,
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
      if (!encoded.ok()) return LaunchError(op_, encoded);
      continue;
    }
    if (alias != nullptr && alias->isWrite()) {
      // The client returns its own argument (the kernel wrote through its
      // memory): no copy, except an out= stand-in that the kernel resized,
      // which the client adopts.
      proto::Argument* result = reply.add_results();
      result->set_none(true);
      for (const auto& [index, out] : out_arguments) {
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
    if (!encoded.ok()) return LaunchError(op_, encoded);
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
    return LaunchError(
        op_, proto::INVALID_VALUE,
        absl::StrCat("reply of ", size,
                     " bytes exceeds the stream's reply area of ", limit,
                     " bytes"));
  }
  char* area = session_.reply_area(context_.slot_index);
  if (!reply.SerializeToArray(area, static_cast<int>(size))) {
    return LaunchError(op_, proto::INTERNAL, "cannot serialize the reply");
  }
  // Published by the completion counter, which advances after this.
  context_.slot->reply_size = size;
  context_.slot->reply_sequence = sequence;
  return absl::OkStatus();
}

void LaunchReply::PostWarnings(
    const std::vector<proto::KernelWarning>& warnings) {
  for (const proto::KernelWarning& warning : warnings) {
    PostToMailbox(context_.slot->warnings, warning.SerializeAsString());
  }
}

void LaunchReply::ReleaseResults() {
  for (uint64_t address : result_addresses_) {
    session_.Free(address).IgnoreError();
  }
  result_addresses_.clear();
}

absl::StatusOr<at::Tensor> LaunchReply::DecodeTensorRef(
    const proto::TensorRef& /*ref*/) {
  return MakeError(proto::INTERNAL, "the launch reply decodes no arguments");
}

}  // namespace openreg::daemon
