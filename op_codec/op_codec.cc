#include "op_codec/op_codec.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/_sparse_coo_tensor_unsafe.h>
#include <ATen/ops/empty.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/dtype.h"
#include "data_plane/error_codes.h"
#include "data_plane/tensor_extent.h"

namespace openreg::op_codec {
namespace {

absl::Status Invalid(absl::string_view message) {
  return MakeError(proto::INVALID_VALUE, message);
}

}  // namespace

absl::Status CheckTensorRef(const proto::TensorRef& ref) {
  const auto dtype = static_cast<c10::ScalarType>(ref.dtype());
  const bool quantized = c10::isQIntType(dtype);
  if (quantized != ref.has_quantization()) {
    return Invalid(quantized
                       ? absl::StrCat("quantized dtype ", c10::toString(dtype),
                                      " without a quantizer")
                       : "a quantizer on a dtype that is not quantized");
  }
  if (quantized && !(std::isfinite(ref.quantization().scale()) &&
                     ref.quantization().scale() > 0)) {
    return Invalid("a quantizer whose scale is not positive and finite");
  }
  if (quantized && dtype != c10::kQInt8 && dtype != c10::kQUInt8 &&
      dtype != c10::kQInt32) {
    return Invalid(absl::StrCat("quantized dtype ", c10::toString(dtype),
                                " is not supported on openreg devices"));
  }
  if (ref.conj() && !c10::isComplexType(dtype)) {
    return Invalid("the conjugate bit is set on a real tensor");
  }
  if (ref.storage_offset() < 0) {
    return Invalid(
        absl::StrCat("a negative storage offset (", ref.storage_offset(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckNotQuantized(int32_t dtype) {
  if (c10::isQIntType(static_cast<c10::ScalarType>(dtype))) {
    return Invalid(absl::StrCat(
        "quantized dtype ", c10::toString(static_cast<c10::ScalarType>(dtype)),
        " is not supported on openreg devices"));
  }
  return absl::OkStatus();
}

namespace {

// ScalarType, Layout and MemoryFormat arguments travel as plain ints (their
// schema type() is int; real_type() tells), and ATen indexes tables with
// them unchecked in release builds. Returns -1 when `schema` is not such an
// enum.
int64_t EnumLimit(const c10::Argument& schema) {
  c10::TypePtr type = schema.real_type();
  if (type->kind() == c10::TypeKind::OptionalType) {
    type = type->castRaw<c10::OptionalType>()->getElementType();
  }
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return kNumKnownDtypes;  // excludes Undefined
    case c10::TypeKind::LayoutType:
      return static_cast<int64_t>(c10::Layout::NumOptions);
    case c10::TypeKind::MemoryFormatType:
      return static_cast<int64_t>(c10::MemoryFormat::NumOptions);
    default:
      return -1;
  }
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

c10::Scalar DecodeScalar(const proto::Scalar& scalar) {
  switch (scalar.value_case()) {
    case proto::Scalar::kI:
      return c10::Scalar(static_cast<int64_t>(scalar.i()));
    case proto::Scalar::kD:
      return c10::Scalar(scalar.d());
    case proto::Scalar::kB:
      return c10::Scalar(scalar.b());
    case proto::Scalar::kC:
      return c10::Scalar(
          c10::complex<double>(scalar.c().real(), scalar.c().imag()));
    case proto::Scalar::VALUE_NOT_SET:
      break;
  }
  return c10::Scalar(int64_t{0});
}

absl::Status EncodeSparseCoo(const at::Tensor& tensor,
                             DeviceTensorCodec& tensors,
                             proto::SparseCooTensor* out) {
  if (absl::Status indices =
          tensors.EncodeTensor(tensor._indices(), out->mutable_indices());
      !indices.ok()) {
    return indices;
  }
  if (absl::Status values =
          tensors.EncodeTensor(tensor._values(), out->mutable_values());
      !values.ok()) {
    return values;
  }
  for (int64_t size : tensor.sizes()) out->add_sizes(size);
  out->set_coalesced(tensor.is_coalesced());
  return absl::OkStatus();
}

absl::Status EncodeTensorOrNone(const at::Tensor& tensor,
                                DeviceTensorCodec& tensors,
                                proto::Argument* out) {
  if (!tensor.defined()) {
    out->set_none(true);
    return absl::OkStatus();
  }
  if (tensor.layout() == at::kSparse) {
    return EncodeSparseCoo(tensor, tensors, out->mutable_sparse_coo());
  }
  if (tensor.layout() != at::kStrided) {
    return MakeError(proto::KERNEL_NOT_IMPLEMENTED_ERROR,
                     absl::StrCat("openreg supports strided and sparse COO "
                                  "tensors only, not layout ",
                                  c10::str(tensor.layout())));
  }
  return tensors.EncodeTensor(tensor, out);
}

// A number returned for a Scalar (Number) return keeps its kind.
absl::Status EncodeNumber(const c10::IValue& value, proto::Scalar* out) {
  if (value.isInt()) {
    out->set_i(value.toInt());
  } else if (value.isDouble()) {
    out->set_d(value.toDouble());
  } else if (value.isBool()) {
    out->set_b(value.toBool());
  } else if (value.isComplexDouble()) {
    const c10::complex<double> complex = value.toComplexDouble();
    out->mutable_c()->set_real(complex.real());
    out->mutable_c()->set_imag(complex.imag());
  } else {
    return Invalid(
        absl::StrCat("cannot encode a ", value.tagKind(), " as a number"));
  }
  return absl::OkStatus();
}

// Generic lists: Scalar[] and SymInt[] as numbers, Tensor?[] as tensors
// or None.
absl::Status EncodeGenericList(const c10::List<c10::IValue>& list,
                               DeviceTensorCodec& tensors,
                               proto::Argument* out) {
  const bool numbers =
      !list.empty() && (list.get(0).isScalar() || list.get(0).isSymInt());
  if (numbers) {
    // mutable_*() first: the oneof is set even when every element goes to
    // the other list kind.
    if (list.get(0).isSymInt()) {
      out->mutable_int_list();
    } else {
      out->mutable_scalar_list();
    }
    for (const c10::IValue& element : list) {
      if (element.isSymInt()) {
        out->mutable_int_list()->add_values(
            element.toSymInt().guard_int(__FILE__, __LINE__));
      } else {
        EncodeScalar(element.toScalar(),
                     out->mutable_scalar_list()->add_values());
      }
    }
    return absl::OkStatus();
  }
  proto::OptionalTensorList* values = out->mutable_tensor_list();
  for (const c10::IValue& element : list) {
    if (element.isNone()) {
      values->add_values()->set_none(true);
    } else if (element.isTensor()) {
      absl::Status encoded =
          EncodeTensorOrNone(element.toTensor(), tensors, values->add_values());
      if (!encoded.ok()) return encoded;
    } else {
      return Invalid(
          absl::StrCat("cannot encode a list of ", element.tagKind()));
    }
  }
  return absl::OkStatus();
}

// Errors about one argument name it (when the schema is known), whatever
// went wrong inside.
class ArgumentContext {
 public:
  explicit ArgumentContext(const c10::Argument* schema) : schema_(schema) {}

  absl::Status Bad(absl::string_view why) const {
    return Bad(proto::INVALID_VALUE, why);
  }
  // A tensor that could not be decoded keeps its code (a device fault's
  // lost memory is not a bad value).
  absl::Status Bad(const absl::Status& status) const {
    return Bad(ErrorCodeOf(status), status.message());
  }
  absl::Status Bad(proto::ErrorCode code, absl::string_view why) const {
    if (schema_ == nullptr) return MakeError(code, why);
    return MakeError(code, absl::StrCat("argument '", schema_->name(), "' (",
                                        schema_->type()->str(), "): ", why));
  }
  // Keeps the code of `status` (e.g. INVALID_DEVICE).
  absl::Status Wrap(const absl::Status& status) const {
    if (schema_ == nullptr) return status;
    return MakeError(
        ErrorCodeOf(status),
        absl::StrCat("argument '", schema_->name(), "' ", status.message()));
  }

 private:
  const c10::Argument* schema_;
};

absl::StatusOr<at::Tensor> DecodeSparseCoo(const proto::SparseCooTensor& sparse,
                                           DeviceTensorCodec& tensors);

absl::StatusOr<at::Tensor> DecodeTensor(const proto::Argument& argument,
                                        DeviceTensorCodec& tensors) {
  if (argument.has_sparse_coo()) {
    return DecodeSparseCoo(argument.sparse_coo(), tensors);
  }
  if (argument.has_tensor()) {
    if (absl::Status valid = CheckTensorRef(argument.tensor()); !valid.ok()) {
      return valid;
    }
    return tensors.DecodeTensorRef(argument.tensor());
  }
  if (argument.has_host_tensor()) {
    return DecodeHostTensor(argument.host_tensor());
  }
  return Invalid("expected a tensor");
}

// A strided tensor (never a nested sparse one) inside a sparse tensor.
absl::StatusOr<at::Tensor> DecodeSparsePart(const proto::Argument& part,
                                            DeviceTensorCodec& tensors) {
  if (part.has_sparse_coo()) return Invalid("a sparse tensor inside one");
  return DecodeTensor(part, tensors);
}

absl::StatusOr<at::Tensor> DecodeSparseCoo(const proto::SparseCooTensor& sparse,
                                           DeviceTensorCodec& tensors) {
  absl::StatusOr<at::Tensor> indices =
      DecodeSparsePart(sparse.indices(), tensors);
  if (!indices.ok()) return indices.status();
  absl::StatusOr<at::Tensor> values =
      DecodeSparsePart(sparse.values(), tensors);
  if (!values.ok()) return values.status();
  const std::vector<int64_t> sizes(sparse.sizes().begin(),
                                   sparse.sizes().end());
  if (sizes.size() > static_cast<size_t>(kMaxTensorDims)) {
    return Invalid("sparse tensor: too many dims");
  }
  for (int64_t size : sizes) {
    if (size < 0) return Invalid("sparse tensor: a negative size");
  }
  if (indices->scalar_type() != at::kLong || indices->dim() != 2) {
    return Invalid("sparse tensor: indices must be a 2-D int64 tensor");
  }
  const int64_t sparse_dim = indices->size(0);
  const int64_t nnz = indices->size(1);
  if (values->dim() < 1 || values->size(0) != nnz ||
      sparse_dim + values->dim() - 1 != static_cast<int64_t>(sizes.size())) {
    return Invalid(
        "sparse tensor: indices, values and sizes do not fit together");
  }
  for (int64_t dim = 1; dim < values->dim(); ++dim) {
    if (values->size(dim) != sizes[sparse_dim + dim - 1]) {
      return Invalid("sparse tensor: values do not match its dense sizes");
    }
  }
  if (absl::Status checked = tensors.CheckSparseIndices(*indices, sizes);
      !checked.ok()) {
    return checked;
  }
  return at::_sparse_coo_tensor_unsafe(
      *indices, *values, sizes, values->scalar_type(), at::kSparse,
      values->device(), /*pin_memory=*/std::nullopt, sparse.coalesced());
}

absl::StatusOr<c10::IValue> DecodeTensorList(
    const proto::OptionalTensorList& list, const c10::TypePtr& type,
    const ArgumentContext& context, DeviceTensorCodec& tensors) {
  // Tensor[] and Tensor?[] box differently; the schema decides.
  const bool optional_elements =
      type != nullptr && type->kind() == c10::TypeKind::ListType &&
      type->castRaw<c10::ListType>()->getElementType()->kind() ==
          c10::TypeKind::OptionalType;
  if (optional_elements) {
    c10::List<std::optional<at::Tensor>> decoded;
    for (const proto::Argument& element : list.values()) {
      if (element.has_none()) {
        decoded.push_back(std::nullopt);
        continue;
      }
      absl::StatusOr<at::Tensor> tensor = DecodeTensor(element, tensors);
      if (!tensor.ok()) return context.Bad(tensor.status());
      decoded.push_back(*std::move(tensor));
    }
    return c10::IValue(std::move(decoded));
  }
  if (type == nullptr) {
    // A result list: a None element is an undefined tensor (e.g. a
    // gradient the output mask disabled).
    std::vector<at::Tensor> decoded;
    decoded.reserve(list.values_size());
    for (const proto::Argument& element : list.values()) {
      if (element.has_none()) {
        decoded.emplace_back();
        continue;
      }
      absl::StatusOr<at::Tensor> tensor = DecodeTensor(element, tensors);
      if (!tensor.ok()) return tensor.status();
      decoded.push_back(*std::move(tensor));
    }
    return c10::IValue(std::move(decoded));
  }
  c10::List<at::Tensor> decoded;
  for (const proto::Argument& element : list.values()) {
    absl::StatusOr<at::Tensor> tensor = DecodeTensor(element, tensors);
    if (!tensor.ok()) return context.Bad(tensor.status());
    decoded.push_back(*std::move(tensor));
  }
  return c10::IValue(std::move(decoded));
}

}  // namespace

int32_t DeviceTensorCodec::EncodeDevice(const c10::Device& device) {
  return device.index();
}

absl::StatusOr<c10::Device> DeviceTensorCodec::DecodeDevice(int32_t index) {
  if (index < -1 || index > std::numeric_limits<c10::DeviceIndex>::max()) {
    return MakeError(proto::INVALID_DEVICE,
                     absl::StrCat("names device ", index));
  }
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(index));
}

absl::StatusOr<c10::IValue> DeviceTensorCodec::DecodeGenerator(
    const proto::GeneratorState&) {
  return Invalid("a generator cannot be decoded on this side");
}

void EncodeTensorRef(const at::Tensor& tensor, proto::TensorRef* ref) {
  ref->set_address(reinterpret_cast<uint64_t>(tensor.const_data_ptr()));
  for (int64_t size : tensor.sizes()) ref->add_sizes(size);
  for (int64_t stride : tensor.strides()) ref->add_strides(stride);
  ref->set_dtype(static_cast<int32_t>(tensor.scalar_type()));
  ref->set_device(tensor.device().index());
  ref->set_storage_offset(tensor.storage_offset());
  if (tensor.is_conj()) ref->set_conj(true);
  if (tensor.is_neg()) ref->set_neg(true);
  if (tensor.is_quantized()) {
    // Not qscheme(): ATen asserts on the UnknownQuantizer of a quantized
    // tensor made by empty() (the output of an op with no quantized kernel).
    const auto* quantizer = dynamic_cast<const at::PerTensorAffineQuantizer*>(
        at::get_qtensorimpl(tensor)->quantizer().get());
    TORCH_CHECK_NOT_IMPLEMENTED(
        quantizer != nullptr,
        "openreg supports per-tensor affine quantized tensors only (this one "
        "has another quantizer, or none: an op without a quantized kernel "
        "made it)");
    ref->mutable_quantization()->set_scale(quantizer->scale());
    ref->mutable_quantization()->set_zero_point(quantizer->zero_point());
  }
}

at::Tensor TensorOverStorage(c10::Storage storage, c10::DispatchKey backend,
                             const proto::TensorRef& ref) {
  const auto dtype = static_cast<at::ScalarType>(ref.dtype());
  at::Tensor tensor;
  if (ref.has_quantization()) {
    const c10::DispatchKey quantized =
        backend == c10::DispatchKey::CPU
            ? c10::DispatchKey::QuantizedCPU
            : c10::DispatchKey::QuantizedPrivateUse1;
    tensor = at::detail::make_tensor<at::QTensorImpl>(
        std::move(storage), c10::DispatchKeySet(quantized),
        c10::scalarTypeToTypeMeta(dtype),
        at::make_per_tensor_affine_quantizer(ref.quantization().scale(),
                                             ref.quantization().zero_point(),
                                             dtype));
  } else {
    tensor = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(backend),
        c10::scalarTypeToTypeMeta(dtype));
  }
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(
      c10::IntArrayRef(ref.sizes().data(), ref.sizes_size()),
      c10::IntArrayRef(ref.strides().data(), ref.strides_size()));
  // Only the ops that handle these bits themselves see them set (the
  // client's Conjugate/Negative fallbacks resolve the rest).
  if (ref.conj()) tensor._set_conj(true);
  if (ref.neg()) tensor._set_neg(true);
  return tensor;
}

absl::Status EncodeHostTensor(const at::Tensor& tensor,
                              proto::HostTensor* out) {
  const at::Tensor contiguous = tensor.contiguous();
  const int64_t nbytes = contiguous.numel() * contiguous.element_size();
  if (nbytes > kMaxInlineHostBytes) {
    return Invalid(
        absl::StrCat("a CPU tensor of ", nbytes, " bytes is larger than the ",
                     kMaxInlineHostBytes, " bytes that travel inline"));
  }
  for (int64_t size : contiguous.sizes()) out->add_sizes(size);
  out->set_dtype(static_cast<int32_t>(contiguous.scalar_type()));
  out->set_data(contiguous.const_data_ptr(), nbytes);
  if (tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
    out->set_wrapped_number(true);
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> DecodeHostTensor(const proto::HostTensor& host) {
  const int64_t element_size = DtypeElementSize(host.dtype());
  if (element_size == 0) {
    return Invalid(
        absl::StrCat("host tensor has unknown dtype ", host.dtype()));
  }
  if (absl::Status dtype = CheckNotQuantized(host.dtype()); !dtype.ok()) {
    return dtype;
  }
  if (host.sizes_size() > kMaxTensorDims) {
    return Invalid(absl::StrCat("host tensor has more than ", kMaxTensorDims,
                                " dimensions"));
  }
  int64_t numel = 1;
  for (int64_t size : host.sizes()) {
    if (size < 0 || __builtin_mul_overflow(numel, size, &numel)) {
      return Invalid("host tensor has invalid sizes");
    }
  }
  const c10::IntArrayRef sizes(host.sizes().data(), host.sizes_size());
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, element_size, &bytes) ||
      static_cast<uint64_t>(bytes) != host.data().size()) {
    return Invalid(absl::StrCat("host tensor of shape ", c10::str(sizes),
                                " needs ", numel, " x ", element_size,
                                " bytes but carries ", host.data().size()));
  }
  at::Tensor tensor =
      at::empty(sizes, at::TensorOptions()
                           .dtype(static_cast<at::ScalarType>(host.dtype()))
                           .device(at::kCPU));
  if (bytes != 0) std::memcpy(tensor.data_ptr(), host.data().data(), bytes);
  if (host.wrapped_number() && tensor.dim() == 0) {
    tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  }
  return tensor;
}

absl::Status EncodeValue(const c10::IValue& value, const c10::TypePtr& type,
                         DeviceTensorCodec& tensors, proto::Argument* out) {
  if (value.isNone()) {
    out->set_none(true);
  } else if (value.isTensor()) {
    return EncodeTensorOrNone(value.toTensor(), tensors, out);
  } else if (type != nullptr && type->kind() == c10::TypeKind::NumberType) {
    return EncodeNumber(value, out->mutable_scalar());
  } else if (value.isBool()) {
    out->set_bool_value(value.toBool());
  } else if (value.isInt()) {
    out->set_int_value(value.toInt());
  } else if (value.isSymInt()) {
    out->set_int_value(value.toSymInt().guard_int(__FILE__, __LINE__));
  } else if (value.isDouble()) {
    out->set_double_value(value.toDouble());
  } else if (value.isSymFloat()) {
    out->set_double_value(value.toSymFloat().guard_float(__FILE__, __LINE__));
  } else if (value.isComplexDouble()) {
    const c10::complex<double> complex = value.toComplexDouble();
    out->mutable_complex_value()->set_real(complex.real());
    out->mutable_complex_value()->set_imag(complex.imag());
  } else if (value.isString()) {
    out->set_string_value(value.toStringRef());
  } else if (value.isDevice()) {
    out->set_device(tensors.EncodeDevice(value.toDevice()));
  } else if (value.isIntList()) {
    // mutable_*() first: an empty list must still set the oneof.
    proto::IntList* list = out->mutable_int_list();
    for (int64_t element : value.toIntVector()) list->add_values(element);
  } else if (value.isDoubleList()) {
    proto::DoubleList* list = out->mutable_double_list();
    for (double element : value.toDoubleVector()) list->add_values(element);
  } else if (value.isBoolList()) {
    proto::BoolList* list = out->mutable_bool_list();
    for (bool element : value.toBoolList()) list->add_values(element);
  } else if (value.isTensorList()) {
    proto::OptionalTensorList* list = out->mutable_tensor_list();
    for (const at::Tensor& element : value.toTensorVector()) {
      absl::Status encoded =
          EncodeTensorOrNone(element, tensors, list->add_values());
      if (!encoded.ok()) return encoded;
    }
  } else if (value.isList()) {
    return EncodeGenericList(value.toList(), tensors, out);
  } else {
    // Generators travel as draws (GeneratorState), encoded by the launch
    // that knows the device; no ATen schema has other kinds.
    return absl::UnimplementedError(
        absl::StrCat("openreg: cannot send a value of type ", value.tagKind(),
                     " to or from the daemon"));
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> DecodeValue(const proto::Argument& argument,
                                        const c10::Argument* schema,
                                        DeviceTensorCodec& tensors) {
  const ArgumentContext context(schema);
  c10::TypePtr type = schema != nullptr ? schema->type() : nullptr;
  bool optional = false;
  if (type != nullptr && type->kind() == c10::TypeKind::OptionalType) {
    optional = true;
    type = type->castRaw<c10::OptionalType>()->getElementType();
  }
  switch (argument.value_case()) {
    case proto::Argument::kNone:
      if (type == nullptr || optional ||
          type->kind() == c10::TypeKind::NoneType) {
        return c10::IValue();
      }
      return context.Bad("None given for a non-optional argument");
    case proto::Argument::kTensor:
    case proto::Argument::kHostTensor:
    case proto::Argument::kSparseCoo: {
      absl::StatusOr<at::Tensor> tensor = DecodeTensor(argument, tensors);
      if (!tensor.ok()) return context.Bad(tensor.status());
      return c10::IValue(*std::move(tensor));
    }
    case proto::Argument::kIntValue: {
      const int64_t value = argument.int_value();
      if (type != nullptr) {
        const int64_t limit = EnumLimit(*schema);
        if (limit >= 0 && (value < 0 || value >= limit)) {
          return context.Bad(absl::StrCat(value, " is not a valid enum value"));
        }
        if (type->kind() == c10::TypeKind::FloatType) {
          return c10::IValue(static_cast<double>(value));
        }
      }
      return c10::IValue(value);
    }
    case proto::Argument::kDoubleValue:
      return c10::IValue(argument.double_value());
    case proto::Argument::kBoolValue:
      return c10::IValue(argument.bool_value());
    case proto::Argument::kStringValue:
      return c10::IValue(argument.string_value());
    case proto::Argument::kScalar:
      return c10::IValue(DecodeScalar(argument.scalar()));
    case proto::Argument::kComplexValue:
      return c10::IValue(c10::complex<double>(argument.complex_value().real(),
                                              argument.complex_value().imag()));
    case proto::Argument::kIntList:
      return c10::IValue(c10::List<int64_t>(
          std::vector<int64_t>(argument.int_list().values().begin(),
                               argument.int_list().values().end())));
    case proto::Argument::kDoubleList:
      return c10::IValue(c10::List<double>(
          std::vector<double>(argument.double_list().values().begin(),
                              argument.double_list().values().end())));
    case proto::Argument::kBoolList: {
      c10::List<bool> list;
      for (bool value : argument.bool_list().values()) list.push_back(value);
      return c10::IValue(std::move(list));
    }
    case proto::Argument::kScalarList: {
      c10::impl::GenericList list(c10::NumberType::get());
      for (const proto::Scalar& scalar : argument.scalar_list().values()) {
        list.push_back(c10::IValue(DecodeScalar(scalar)));
      }
      return c10::IValue(std::move(list));
    }
    case proto::Argument::kTensorList:
      return DecodeTensorList(argument.tensor_list(), type, context, tensors);
    case proto::Argument::kDevice: {
      absl::StatusOr<c10::Device> device =
          tensors.DecodeDevice(argument.device());
      if (!device.ok()) return context.Wrap(device.status());
      return c10::IValue(*device);
    }
    case proto::Argument::kGenerator:
      if (type != nullptr && type->kind() != c10::TypeKind::GeneratorType) {
        return context.Bad("a generator given for a non-generator argument");
      }
      return tensors.DecodeGenerator(argument.generator());
    case proto::Argument::VALUE_NOT_SET:
      break;
  }
  return context.Bad("argument has no value");
}

absl::Status DeviceTensorCodec::CheckSparseIndices(
    const at::Tensor& /*indices*/, c10::IntArrayRef /*sizes*/) {
  return absl::OkStatus();
}

}  // namespace openreg::op_codec
