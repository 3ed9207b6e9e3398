#include "torch_backend/op_encoding.h"

#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>

#include "torch_backend/device_allocator.h"

namespace openreg::torch_backend {
namespace {

// Inline CPU tensors ride in the command ring, whose records are bounded.
constexpr int64_t kMaxInlineHostBytes = 64 * 1024;

void EncodeHostTensor(const at::Tensor& tensor, proto::HostTensor* host) {
  const at::Tensor contiguous = tensor.contiguous();
  const int64_t nbytes = contiguous.numel() * contiguous.element_size();
  TORCH_CHECK(
      nbytes <= kMaxInlineHostBytes,
      "Expected all tensors to be on the same device, but found at "
      "least two devices, openreg and cpu! (a CPU tensor of ",
      nbytes,
      " bytes was passed to an openreg op; move it with .to(\"openreg\"))");
  for (int64_t size : contiguous.sizes()) host->add_sizes(size);
  host->set_dtype(static_cast<int32_t>(contiguous.scalar_type()));
  host->set_data(contiguous.const_data_ptr(), nbytes);
}

void EncodeScalar(const c10::Scalar& scalar, proto::Scalar* out) {
  if (scalar.isBoolean()) {
    out->set_b(scalar.toBool());
  } else if (scalar.isIntegral(/*includeBool=*/false)) {
    out->set_i(scalar.toLong());
  } else if (scalar.isComplex()) {
    const c10::complex<double> value = scalar.toComplexDouble();
    out->mutable_c()->set_real(value.real());
    out->mutable_c()->set_imag(value.imag());
  } else {
    out->set_d(scalar.toDouble());
  }
}

void EncodeTensorOrHost(const at::Tensor& tensor, proto::Argument* argument) {
  if (!tensor.defined()) {
    argument->set_none(true);
  } else if (tensor.is_privateuseone()) {
    EncodeTensorRef(tensor, argument->mutable_tensor());
  } else {
    EncodeHostTensor(tensor, argument->mutable_host_tensor());
  }
}

}  // namespace

void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref) {
  ref->set_address(reinterpret_cast<uint64_t>(tensor.const_data_ptr()));
  for (int64_t size : tensor.sizes()) ref->add_sizes(size);
  for (int64_t stride : tensor.strides()) ref->add_strides(stride);
  ref->set_dtype(static_cast<int32_t>(tensor.scalar_type()));
  ref->set_device(tensor.device().index());
  if (tensor.is_conj()) ref->set_conj(true);
  if (tensor.is_neg()) ref->set_neg(true);
}

void EncodeArgument(const c10::IValue& value, proto::Argument* argument) {
  if (value.isNone()) {
    argument->set_none(true);
  } else if (value.isTensor()) {
    EncodeTensorOrHost(value.toTensor(), argument);
  } else if (value.isBool()) {
    argument->set_bool_value(value.toBool());
  } else if (value.isInt()) {
    argument->set_int_value(value.toInt());
  } else if (value.isSymInt()) {
    argument->set_int_value(value.toSymInt().guard_int(__FILE__, __LINE__));
  } else if (value.isDouble()) {
    argument->set_double_value(value.toDouble());
  } else if (value.isSymFloat()) {
    argument->set_double_value(
        value.toSymFloat().guard_float(__FILE__, __LINE__));
  } else if (value.isComplexDouble()) {
    const c10::complex<double> complex = value.toComplexDouble();
    argument->mutable_complex_value()->set_real(complex.real());
    argument->mutable_complex_value()->set_imag(complex.imag());
  } else if (value.isString()) {
    argument->set_string_value(value.toStringRef());
  } else if (value.isDevice()) {
    // device="openreg" (no index) means the current device.
    const c10::Device device = value.toDevice();
    const bool current =
        device.type() == c10::DeviceType::PrivateUse1 && !device.has_index();
    argument->set_device(
        current
            ? c10::impl::getDeviceGuardImpl(device.type())->getDevice().index()
            : device.index());
  } else if (value.isGenerator()) {
    // Generator parameters are encoded by the launch (kernels/
    // remote_launch.cc), which knows the device whose default generator a
    // None stands for. Reaching here means a generator outside a Generator
    // parameter, which no ATen schema has.
    TORCH_CHECK(false, "openreg: unexpected Generator argument");
  } else if (value.isIntList()) {
    // mutable_*() first: an empty list must still set the oneof.
    proto::IntList* list = argument->mutable_int_list();
    for (int64_t element : value.toIntVector()) list->add_values(element);
  } else if (value.isDoubleList()) {
    proto::DoubleList* list = argument->mutable_double_list();
    for (double element : value.toDoubleVector()) list->add_values(element);
  } else if (value.isBoolList()) {
    proto::BoolList* list = argument->mutable_bool_list();
    for (bool element : value.toBoolList()) list->add_values(element);
  } else if (value.isTensorList()) {
    proto::OptionalTensorList* list = argument->mutable_tensor_list();
    for (const at::Tensor& element : value.toTensorVector()) {
      EncodeTensorOrHost(element, list->add_values());
    }
  } else if (value.isList()) {
    // Tensor?[] and Scalar[] (and SymInt[]) arrive as generic lists.
    const c10::List<c10::IValue> list = value.toList();
    const bool scalars =
        !list.empty() && (list.get(0).isScalar() || list.get(0).isSymInt());
    if (scalars && list.get(0).isSymInt()) {
      argument->mutable_int_list();
    } else if (scalars) {
      argument->mutable_scalar_list();
    }
    if (scalars) {
      for (const c10::IValue& element : list) {
        if (element.isSymInt()) {
          argument->mutable_int_list()->add_values(
              element.toSymInt().guard_int(__FILE__, __LINE__));
        } else {
          EncodeScalar(element.toScalar(),
                       argument->mutable_scalar_list()->add_values());
        }
      }
    } else {
      proto::OptionalTensorList* tensors = argument->mutable_tensor_list();
      for (const c10::IValue& element : list) {
        if (element.isNone()) {
          tensors->add_values()->set_none(true);
        } else {
          EncodeTensorOrHost(element.toTensor(), tensors->add_values());
        }
      }
    }
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "openreg: cannot send an argument of type ",
                                value.tagKind(), " to the daemon");
  }
}

at::Tensor WrapDaemonTensor(const proto::TensorRef& ref) {
  std::vector<int64_t> sizes(ref.sizes().begin(), ref.sizes().end());
  std::vector<int64_t> strides(ref.strides().begin(), ref.strides().end());
  const auto dtype = static_cast<c10::ScalarType>(ref.dtype());
  const auto device = static_cast<c10::DeviceIndex>(ref.device());
  int64_t extent = 0;  // elements spanned, as the daemon allocated them
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) empty = true;
    extent += (sizes[i] - 1) * strides[i];
  }
  const size_t nbytes =
      empty ? 0 : static_cast<size_t>(extent + 1) * c10::elementSize(dtype);
  DeviceAllocator& allocator = GetDeviceAllocator();
  c10::DataPtr data = allocator.Adopt(
      nbytes == 0 ? nullptr : reinterpret_cast<void*>(ref.address()), nbytes,
      device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       &allocator, /*resizable=*/true);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return tensor;
}

c10::IValue DecodeResult(const proto::Argument& result) {
  switch (result.value_case()) {
    case proto::Argument::kTensor:
      return WrapDaemonTensor(result.tensor());
    case proto::Argument::kTensorList: {
      std::vector<at::Tensor> tensors;
      for (const proto::Argument& element : result.tensor_list().values()) {
        tensors.push_back(element.has_tensor()
                              ? WrapDaemonTensor(element.tensor())
                              : at::Tensor());
      }
      return tensors;
    }
    case proto::Argument::kIntValue:
      return result.int_value();
    case proto::Argument::kDoubleValue:
      return result.double_value();
    case proto::Argument::kBoolValue:
      return result.bool_value();
    case proto::Argument::kScalar: {
      const proto::Scalar& scalar = result.scalar();
      if (scalar.has_c()) {
        return c10::complex<double>(scalar.c().real(), scalar.c().imag());
      }
      if (scalar.value_case() == proto::Scalar::kB) return scalar.b();
      if (scalar.value_case() == proto::Scalar::kI) return scalar.i();
      return scalar.d();
    }
    case proto::Argument::kComplexValue:
      return c10::complex<double>(result.complex_value().real(),
                                  result.complex_value().imag());
    case proto::Argument::kNone:
    case proto::Argument::VALUE_NOT_SET:
      return c10::IValue();
    default:
      TORCH_CHECK(false, "openreg: unexpected result kind ",
                  static_cast<int>(result.value_case()), " from the daemon");
  }
}

}  // namespace openreg::torch_backend
