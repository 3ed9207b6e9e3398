#include "device_daemon/kernels/out_arguments.h"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/RefcountedDeleter.h>

#include <utility>

namespace openreg::daemon {

// Some out= kernels resize their output on the way (mse_loss.out with a
// reduction first writes the elementwise loss into it) or get a wrongly
// sized one, and client memory cannot grow. The kernel gets an alias of the
// client's memory whose storage may grow: a resize beyond it moves the
// data to daemon memory, and FinishOutArguments (or CopyToOutputs, for
// asynchronous launches) copies it back or hands it to the client.
void ReplaceOutArguments(const c10::FunctionSchema& schema,
                         torch::jit::Stack* stack,
                         OutArguments* out_arguments) {
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (!schema.arguments()[i].is_out() || !(*stack)[i].isTensor()) continue;
    const at::Tensor client = (*stack)[i].toTensor();
    // A sparse out= is rebuilt by its kernel and returned (WriteReply).
    if (!client.defined() || client.layout() != at::kStrided) continue;
    const c10::Storage& storage = client.storage();
    c10::DataPtr data;
    const c10::DataPtr& pinned = storage.data_ptr();
    if (pinned.get_deleter() == &c10::refcounted_deleter) {
      // The launch's shared pin (LaunchDecoder::DeviceTensor): the alias
      // holds the allocation, and ATen sees it alias the launch's other
      // tensors in that allocation, so its overlap checks hold.
      auto* pin =
          static_cast<c10::RefcountedDeleterContext*>(pinned.get_context());
      pin->refcount.fetch_add(1, std::memory_order_relaxed);
      data = c10::DataPtr(storage.mutable_data(), pin, &c10::refcounted_deleter,
                          c10::Device(c10::kCPU));
    } else {
      // The alias keeps the client tensor, and so its pin, alive.
      auto* keep_alive = new at::Tensor(client);
      data = c10::DataPtr(
          storage.mutable_data(), keep_alive,
          [](void* context) { delete static_cast<at::Tensor*>(context); },
          c10::Device(c10::kCPU));
    }
    c10::Storage growable(c10::Storage::use_byte_size_t(), storage.nbytes(),
                          std::move(data), c10::GetCPUAllocator(),
                          /*resizable=*/true);
    at::Tensor stand_in;
    if (client.is_quantized()) {
      stand_in = at::empty({0}, client.options())
                     .set_(growable, client.storage_offset(), client.sizes(),
                           client.strides());
    } else {
      // What empty + set_ give, without their two dispatches (a few
      // microseconds of every out= launch).
      stand_in = at::detail::make_tensor<c10::TensorImpl>(
          std::move(growable), c10::DispatchKeySet(c10::DispatchKey::CPU),
          client.dtype());
      stand_in.unsafeGetTensorImpl()->set_sizes_and_strides(
          client.sizes(), client.strides(), client.storage_offset());
    }
    (*stack)[i] = stand_in;
    out_arguments->push_back({i, OutArgument{client, stand_in}});
  }
}

void FinishOutArguments(OutArguments* out_arguments) {
  for (auto& [index, out] : *out_arguments) {
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

}  // namespace openreg::daemon
