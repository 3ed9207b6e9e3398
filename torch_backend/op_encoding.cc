#include "torch_backend/op_encoding.h"

#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "data_plane/tensor_extent.h"
#include "op_codec/op_codec.h"
#include "torch_backend/device_allocator.h"

namespace openreg::torch_backend {
namespace {

class ClientTensors : public op_codec::DeviceTensorCodec {
 public:
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override {
    if (tensor.is_privateuseone()) {
      op_codec::EncodeTensorRef(tensor, out->mutable_tensor());
      return absl::OkStatus();
    }
    absl::Status encoded =
        op_codec::EncodeHostTensor(tensor, out->mutable_host_tensor());
    if (encoded.ok()) return encoded;
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected all tensors to be on the same device, but found at least "
        "two devices, openreg and cpu! (",
        encoded.message(),
        ": a CPU tensor was passed to an openreg op; move it with "
        ".to(\"openreg\"))"));
  }

  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override {
    return WrapDaemonTensor(ref);
  }

  // device="openreg" (no index) means the current device.
  int32_t EncodeDevice(const c10::Device& device) override {
    if (device.type() == c10::DeviceType::PrivateUse1 && !device.has_index()) {
      return c10::impl::getDeviceGuardImpl(device.type())->getDevice().index();
    }
    return device.index();
  }
};

ClientTensors& Tensors() {
  static ClientTensors* tensors = new ClientTensors();
  return *tensors;
}

[[noreturn]] void ThrowCodecError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnimplemented) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, status.message());
  }
  TORCH_CHECK(false, status.message());
}

}  // namespace

void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref) {
  op_codec::EncodeTensorRef(tensor, ref);
}

void EncodeArgument(const c10::IValue& value, proto::Argument* argument) {
  const absl::Status encoded =
      op_codec::EncodeValue(value, /*type=*/nullptr, Tensors(), argument);
  if (!encoded.ok()) ThrowCodecError(encoded);
}

at::Tensor WrapDaemonTensor(const proto::TensorRef& ref) {
  const c10::IntArrayRef sizes(ref.sizes().data(), ref.sizes_size());
  const c10::IntArrayRef strides(ref.strides().data(), ref.strides_size());
  const auto dtype = static_cast<c10::ScalarType>(ref.dtype());
  const auto device = static_cast<c10::DeviceIndex>(ref.device());
  // The elements spanned, as the daemon allocated them.
  const size_t nbytes =
      static_cast<size_t>(StridedSpanElements(sizes, strides)) *
      c10::elementSize(dtype);
  DeviceAllocator& allocator = GetDeviceAllocator();
  c10::DataPtr data = allocator.Adopt(
      nbytes == 0 ? nullptr : reinterpret_cast<void*>(ref.address()), nbytes,
      device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       &allocator, /*resizable=*/true);
  return op_codec::TensorOverStorage(std::move(storage),
                                     c10::DispatchKey::PrivateUse1, ref);
}

c10::IValue DecodeResult(const proto::Argument& result) {
  absl::StatusOr<c10::IValue> decoded =
      op_codec::DecodeValue(result, /*schema=*/nullptr, Tensors());
  if (!decoded.ok()) ThrowCodecError(decoded.status());
  return *std::move(decoded);
}

}  // namespace openreg::torch_backend
