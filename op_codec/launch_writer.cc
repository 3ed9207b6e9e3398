#include "op_codec/launch_writer.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstring>

#include "google/protobuf/wire_format_lite.h"
#include "op_codec/op_codec.h"

namespace openreg::op_codec {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kVarint = WireFormatLite::WIRETYPE_VARINT;
constexpr int kFixed64 = WireFormatLite::WIRETYPE_FIXED64;
constexpr int kLengthDelimited = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;

}  // namespace

void LaunchWriter::Grow(size_t bytes) {
  const size_t used = Offset();
  buffer_.resize(std::max<size_t>({2 * buffer_.size(), used + bytes, 256}));
  cursor_ = buffer_.data() + used;
  end_ = buffer_.data() + buffer_.size();
}

void LaunchWriter::PutBytes(const void* data, size_t size) {
  Reserve(size);
  std::memcpy(cursor_, data, size);
  cursor_ += size;
}

void LaunchWriter::PutString(int field, std::string_view bytes) {
  PutTag(field, kLengthDelimited);
  PutVarint(bytes.size());
  PutBytes(bytes.data(), bytes.size());
}

void LaunchWriter::WidenLength(size_t length_at, size_t length) {
  char varint[10];
  size_t size = 0;
  for (uint64_t rest = length; rest != 0; rest >>= 7) {
    varint[size++] =
        static_cast<char>((rest & 0x7f) | (rest >= 0x80 ? 0x80 : 0));
  }
  Reserve(size - 1);
  char* const length_field = buffer_.data() + length_at;
  std::memmove(length_field + size, length_field + 1, length);
  std::memcpy(length_field, varint, size);
  cursor_ += size - 1;
}

namespace {

size_t VarintSize(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

}  // namespace

template <typename Ints>
char* LaunchWriter::WritePackedInts(char* out, int field, const Ints& values) {
  if (values.empty()) return out;  // proto3 omits an empty packed field
  // The length first, so that it takes exactly the bytes protobuf gives it.
  size_t length = 0;
  for (int64_t value : values) {
    length += VarintSize(static_cast<uint64_t>(value));
  }
  out = WriteTag(out, field, kLengthDelimited);
  out = WriteVarint(out, length);
  for (int64_t value : values) {
    out = WriteVarint(out, static_cast<uint64_t>(value));
  }
  return out;
}

template <typename Ints>
void LaunchWriter::PutPackedInts(int field, const Ints& values) {
  Reserve(MaxPackedBytes(values.size()));
  cursor_ = WritePackedInts(cursor_, field, values);
}

void LaunchWriter::PutTensorRef(const at::Tensor& tensor) {
  // EncodeTensorRef's fields, each omitted at its proto3 default. Room for
  // all of them is made once: the four scalar fields and the two flags
  // take a tag and a value, each a varint.
  const c10::IntArrayRef sizes = tensor.sizes();
  const c10::IntArrayRef strides = tensor.strides();
  Reserve(MaxPackedBytes(sizes.size()) + MaxPackedBytes(strides.size()) +
          kMaxVarintBytes * 2 * 6);
  char* out = cursor_;
  const auto address = reinterpret_cast<uint64_t>(tensor.const_data_ptr());
  if (address != 0) {
    out = WriteTag(out, proto::TensorRef::kAddressFieldNumber, kVarint);
    out = WriteVarint(out, address);
  }
  out = WritePackedInts(out, proto::TensorRef::kSizesFieldNumber, sizes);
  out = WritePackedInts(out, proto::TensorRef::kStridesFieldNumber, strides);
  const auto dtype = static_cast<int32_t>(tensor.scalar_type());
  if (dtype != 0) {
    out = WriteTag(out, proto::TensorRef::kDtypeFieldNumber, kVarint);
    out = WriteVarint(out, static_cast<uint64_t>(static_cast<int64_t>(dtype)));
  }
  const int32_t device = tensor.device().index();
  if (device != 0) {
    out = WriteTag(out, proto::TensorRef::kDeviceFieldNumber, kVarint);
    out = WriteVarint(out, static_cast<uint64_t>(static_cast<int64_t>(device)));
  }
  if (tensor.is_conj()) {
    out = WriteTag(out, proto::TensorRef::kConjFieldNumber, kVarint);
    *out++ = 1;
  }
  if (tensor.is_neg()) {
    out = WriteTag(out, proto::TensorRef::kNegFieldNumber, kVarint);
    *out++ = 1;
  }
  const int64_t storage_offset = tensor.storage_offset();
  if (storage_offset != 0) {
    out = WriteTag(out, proto::TensorRef::kStorageOffsetFieldNumber, kVarint);
    out = WriteVarint(out, static_cast<uint64_t>(storage_offset));
  }
  cursor_ = out;
}

bool LaunchWriter::PutHostTensor(const at::Tensor& tensor) {
  // EncodeHostTensor's fields, for a tensor it would send without a copy.
  const int64_t nbytes = tensor.numel() * tensor.element_size();
  if (!tensor.is_contiguous() || nbytes > kMaxInlineHostBytes ||
      tensor.is_quantized() || tensor.is_conj() || tensor.is_neg()) {
    return false;
  }
  const size_t at = BeginMessage(proto::Argument::kHostTensorFieldNumber);
  PutPackedInts(proto::HostTensor::kSizesFieldNumber, tensor.sizes());
  const auto dtype = static_cast<int32_t>(tensor.scalar_type());
  if (dtype != 0) {
    PutTag(proto::HostTensor::kDtypeFieldNumber, kVarint);
    PutVarint(static_cast<uint64_t>(static_cast<int64_t>(dtype)));
  }
  if (nbytes != 0) {
    PutString(
        proto::HostTensor::kDataFieldNumber,
        std::string_view(static_cast<const char*>(tensor.const_data_ptr()),
                         static_cast<size_t>(nbytes)));
  }
  if (tensor.unsafeGetTensorImpl()->is_wrapped_number()) {
    PutTag(proto::HostTensor::kWrappedNumberFieldNumber, kVarint);
    PutVarint(1);
  }
  EndMessage(at);
  return true;
}

bool LaunchWriter::PutTensorValue(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    PutTag(proto::Argument::kNoneFieldNumber, kVarint);
    PutVarint(1);
    return true;
  }
  if (tensor.layout() != at::kStrided) return false;
  if (tensor.is_privateuseone()) {
    if (tensor.is_quantized()) return false;
    const size_t at = BeginMessage(proto::Argument::kTensorFieldNumber);
    PutTensorRef(tensor);
    EndMessage(at);
    return true;
  }
  return tensor.is_cpu() && PutHostTensor(tensor);
}

bool LaunchWriter::PutValue(const c10::IValue& value) {
  if (value.isNone()) {
    PutTag(proto::Argument::kNoneFieldNumber, kVarint);
    PutVarint(1);
  } else if (value.isTensor()) {
    return PutTensorValue(value.toTensor());
  } else if (value.isBool()) {
    PutTag(proto::Argument::kBoolValueFieldNumber, kVarint);
    PutVarint(value.toBool() ? 1 : 0);
  } else if (value.isInt()) {
    PutTag(proto::Argument::kIntValueFieldNumber, kVarint);
    PutVarint(static_cast<uint64_t>(value.toInt()));
  } else if (value.isDouble()) {
    PutTag(proto::Argument::kDoubleValueFieldNumber, kFixed64);
    const double number = value.toDouble();
    PutBytes(&number, sizeof(number));  // little-endian, as on x86-64
  } else if (value.isString()) {
    PutString(proto::Argument::kStringValueFieldNumber, value.toStringRef());
  } else if (value.isIntList()) {
    const size_t at = BeginMessage(proto::Argument::kIntListFieldNumber);
    PutPackedInts(proto::IntList::kValuesFieldNumber, value.toIntList());
    EndMessage(at);
  } else if (value.isTensorList()) {
    const size_t at = BeginMessage(proto::Argument::kTensorListFieldNumber);
    for (const c10::IValue& element : value.toListRef()) {
      const size_t element_at =
          BeginMessage(proto::OptionalTensorList::kValuesFieldNumber);
      if (!PutTensorValue(element.toTensor())) return false;
      EndMessage(element_at);
    }
    EndMessage(at);
  } else {
    return false;
  }
  return true;
}

void LaunchWriter::Begin(std::string_view name, std::string_view overload) {
  cursor_ = buffer_.data();
  if (end_ == nullptr) Grow(0);  // the first launch: no storage yet
  if (!name.empty()) PutString(proto::LaunchOp::kNameFieldNumber, name);
  if (!overload.empty()) {
    PutString(proto::LaunchOp::kOverloadFieldNumber, overload);
  }
}

bool LaunchWriter::AddArgument(const c10::IValue& value) {
  const size_t start = Offset();
  const size_t at = BeginMessage(proto::LaunchOp::kArgumentsFieldNumber);
  if (!PutValue(value)) {
    cursor_ = buffer_.data() + start;
    return false;
  }
  EndMessage(at);
  return true;
}

bool LaunchWriter::AddOutput(const at::Tensor& tensor) {
  if (!tensor.is_privateuseone() || tensor.is_quantized() ||
      tensor.layout() != at::kStrided) {
    return false;
  }
  const size_t at = BeginMessage(proto::LaunchOp::kOutputsFieldNumber);
  PutTensorRef(tensor);
  EndMessage(at);
  return true;
}

void LaunchWriter::SetSettings(const proto::KernelSettings& settings) {
  // Rare (settings other than ATen's defaults): protobuf writes it.
  PutTag(proto::LaunchOp::kSettingsFieldNumber, kLengthDelimited);
  const size_t size = settings.ByteSizeLong();
  PutVarint(size);
  Reserve(size);
  cursor_ = reinterpret_cast<char*>(settings.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(cursor_)));
}

}  // namespace openreg::op_codec
