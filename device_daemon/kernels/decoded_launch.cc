#include "device_daemon/kernels/decoded_launch.h"

#include <c10/util/ArrayRef.h>

#include <utility>
#include <vector>

#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

bool SameShape(c10::IntArrayRef actual,
               const google::protobuf::RepeatedField<int64_t>& recorded) {
  return actual == c10::IntArrayRef(recorded.data(), recorded.size());
}

}  // namespace

DecodedLaunch::~DecodedLaunch() {
  // The tensors first: each holds a reference of the pins below.
  stack_.clear();
  tensors_.clear();
  for (const KeptPin& pin : pins_) c10::refcounted_deleter(pin.context);
}

std::shared_ptr<DeviceBuffer>& DecodedLaunch::Held(const KeptPin& pin) {
  // LaunchDecoder::SharedPin's context: a heap shared_ptr of the buffer.
  return *static_cast<std::shared_ptr<DeviceBuffer>*>(
      pin.context->other_ctx.get());
}

void DecodedLaunch::KeepTensor(const proto::TensorRef* ref, bool growable,
                               const at::Tensor& tensor) {
  tensors_.push_back({ref, growable, tensor, tensor.data_ptr()});
}

void DecodedLaunch::KeepPin(c10::RefcountedDeleterContext* pin) {
  pin->refcount.fetch_add(1, std::memory_order_relaxed);
  KeptPin kept{pin, {}};
  kept.buffer = Held(kept);
  pins_.push_back(std::move(kept));
}

bool DecodedLaunch::Keepable(const c10::FunctionSchema& schema) const {
  auto kept = [this](const at::Tensor& tensor) {
    for (const KeptTensor& entry : tensors_) {
      if (entry.tensor.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) {
        return true;
      }
    }
    return false;
  };
  const std::vector<c10::Argument>& arguments = schema.arguments();
  for (size_t i = 0; i < stack_.size(); ++i) {
    const c10::IValue& value = stack_[i];
    // A generator's state moves with every draw.
    if (value.isGenerator()) return false;
    const c10::AliasInfo* alias =
        i < arguments.size() ? arguments[i].alias_info() : nullptr;
    if (alias == nullptr || !alias->isWrite() || value.isNone()) continue;
    if (value.isTensor()) {
      if (!kept(value.toTensor())) return false;
    } else if (value.isTensorList()) {
      for (const at::Tensor& element : value.toTensorVector()) {
        if (!kept(element)) return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

bool DecodedLaunch::Acquire(const Session& session) {
  for (const KeptPin& pin : pins_) {
    std::shared_ptr<DeviceBuffer> buffer = pin.buffer.lock();
    if (buffer == nullptr) {
      Release();
      return false;
    }
    Held(pin) = std::move(buffer);
  }
  // Read after pinning: had a free come first, the generation says so; a
  // free after it finds the memory pinned until Release.
  if (session.memory_generation() != memory_generation_) {
    Release();
    return false;
  }
  return true;
}

void DecodedLaunch::Release() {
  for (const KeptPin& pin : pins_) Held(pin).reset();
}

const at::Tensor* DecodedLaunch::FindTensor(const proto::TensorRef* ref,
                                            bool growable) const {
  for (const KeptTensor& entry : tensors_) {
    if (entry.ref == ref && entry.growable == growable) return &entry.tensor;
  }
  return nullptr;
}

bool DecodedLaunch::Verify() const {
  for (const KeptTensor& entry : tensors_) {
    const at::Tensor& tensor = entry.tensor;
    if (tensor.data_ptr() != entry.data ||
        tensor.storage_offset() != entry.ref->storage_offset() ||
        !SameShape(tensor.sizes(), entry.ref->sizes()) ||
        !SameShape(tensor.strides(), entry.ref->strides())) {
      return false;
    }
  }
  return true;
}

}  // namespace openreg::daemon
