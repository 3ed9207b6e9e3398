#include "device_daemon/faults/corruption.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace openreg::daemon {
namespace {

// c10::ScalarType values (torch/headeronly/core/ScalarType.h).
enum Dtype : int32_t {
  kByte = 0,
  kChar = 1,
  kShort = 2,
  kInt = 3,
  kLong = 4,
  kHalf = 5,
  kFloat = 6,
  kDouble = 7,
  kComplexFloat = 9,
  kComplexDouble = 10,
  kBool = 11,
  kQInt8 = 12,
  kQUInt8 = 13,
  kQInt32 = 14,
  kBFloat16 = 15,
  kUInt16 = 27,
  kUInt32 = 28,
  kUInt64 = 29,
};

void FlipBit(char* element, uint32_t bit) {
  element[bit / 8] = static_cast<char>(element[bit / 8] ^ (1u << (bit % 8)));
}

// IEEE half -> float, by hand: two small conversions are not worth a
// dependency on c10 in this libtorch-free layer.
float HalfToFloat(uint16_t half) {
  const uint32_t sign = (half >> 15) & 1;
  const int exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa == 0 ? INFINITY : NAN;
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }
  return sign ? -value : value;
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

template <typename T>
T Load(const char* element) {
  T value;
  std::memcpy(&value, element, sizeof(T));
  return value;
}

std::string Hex(const char* element, int width_bytes) {
  std::string text = "0x";
  for (int i = width_bytes - 1; i >= 0; --i) {
    absl::StrAppendFormat(&text, "%02x",
                          static_cast<unsigned char>(element[i]));
  }
  return text;
}

}  // namespace

std::vector<uint32_t> CorruptElement(char* element, int width_bytes,
                                     const proto::Corruption& corruption,
                                     std::mt19937_64& rng) {
  const uint32_t width = static_cast<uint32_t>(width_bytes) * 8;
  std::vector<uint32_t> bits;
  const proto::Corruption::Pattern pattern = corruption.pattern();
  if (pattern == proto::Corruption::ZERO ||
      pattern == proto::Corruption::RANDOM_VALUE) {
    for (uint32_t bit = 0; bit < width; ++bit) bits.push_back(bit);
    if (pattern == proto::Corruption::ZERO) {
      std::memset(element, 0, width_bytes);
    } else {
      for (int i = 0; i < width_bytes; ++i) {
        element[i] = static_cast<char>(rng() & 0xff);
      }
    }
    return bits;
  }
  if (corruption.bits_size() > 0) {
    for (uint32_t bit : corruption.bits()) {
      if (bit < width) bits.push_back(bit);
    }
  } else {
    const uint32_t low = std::min(corruption.min_bit(), width - 1);
    const uint32_t high = std::min(
        corruption.has_max_bit() ? corruption.max_bit() : width - 1, width - 1);
    const uint32_t span = high - low + 1;
    const uint32_t count = std::min(std::max(corruption.bit_count(), 1u), span);
    if (corruption.burst()) {
      const uint32_t first =
          low + static_cast<uint32_t>(std::uniform_int_distribution<uint32_t>(
                    0, span - count)(rng));
      for (uint32_t i = 0; i < count; ++i) bits.push_back(first + i);
    } else {
      // `count` distinct positions from [low, high].
      std::vector<uint32_t> candidates(span);
      for (uint32_t i = 0; i < span; ++i) candidates[i] = low + i;
      for (uint32_t i = 0; i < count; ++i) {
        const uint32_t pick =
            std::uniform_int_distribution<uint32_t>(i, span - 1)(rng);
        std::swap(candidates[i], candidates[pick]);
        bits.push_back(candidates[i]);
      }
      std::sort(bits.begin(), bits.end());
    }
  }
  for (uint32_t bit : bits) FlipBit(element, bit);
  return bits;
}

bool ForceBit(char* element, int width_bytes, uint32_t bit, bool value) {
  if (bit >= static_cast<uint32_t>(width_bytes) * 8) return false;
  const unsigned char mask = static_cast<unsigned char>(1u << (bit % 8));
  unsigned char byte = static_cast<unsigned char>(element[bit / 8]);
  byte = value ? (byte | mask) : (byte & ~mask);
  element[bit / 8] = static_cast<char>(byte);
  return true;
}

std::string FormatElement(const char* element, int width_bytes, int32_t dtype) {
  switch (dtype) {
    case kFloat:
      return absl::StrFormat("%.9g", Load<float>(element));
    case kDouble:
      return absl::StrFormat("%.17g", Load<double>(element));
    case kHalf:
      return absl::StrFormat("%.5g", HalfToFloat(Load<uint16_t>(element)));
    case kBFloat16:
      return absl::StrFormat("%.4g", BFloat16ToFloat(Load<uint16_t>(element)));
    case kComplexFloat:
      return absl::StrFormat("(%.9g, %.9g)", Load<float>(element),
                             Load<float>(element + 4));
    case kComplexDouble:
      return absl::StrFormat("(%.17g, %.17g)", Load<double>(element),
                             Load<double>(element + 8));
    case kByte:
    case kQUInt8:
      return absl::StrCat(Load<uint8_t>(element));
    case kChar:
    case kQInt8:
      return absl::StrCat(Load<int8_t>(element));
    case kShort:
      return absl::StrCat(Load<int16_t>(element));
    case kInt:
    case kQInt32:
      return absl::StrCat(Load<int32_t>(element));
    case kLong:
      return absl::StrCat(Load<int64_t>(element));
    case kUInt16:
      return absl::StrCat(Load<uint16_t>(element));
    case kUInt32:
      return absl::StrCat(Load<uint32_t>(element));
    case kUInt64:
      return absl::StrCat(Load<uint64_t>(element));
    case kBool:
      // Any non-zero byte reads as true; show the byte too once it is not
      // a canonical 0/1.
      if (Load<uint8_t>(element) <= 1) {
        return Load<uint8_t>(element) ? "True" : "False";
      }
      return absl::StrCat("True (byte ", Load<uint8_t>(element), ")");
    default:
      return Hex(element, width_bytes);
  }
}

std::optional<int64_t> ElementOffset(const proto::TensorRef& tensor,
                                     int64_t index) {
  if (index < 0) return std::nullopt;
  int64_t offset = 0;
  int64_t remaining = index;
  for (int dim = tensor.sizes_size() - 1; dim >= 0; --dim) {
    const int64_t size = tensor.sizes(dim);
    if (size <= 0) return std::nullopt;
    const int64_t coordinate = remaining % size;
    remaining /= size;
    const int64_t stride =
        dim < tensor.strides_size() ? tensor.strides(dim) : 0;
    offset += coordinate * stride;
  }
  if (remaining != 0) return std::nullopt;
  return offset;
}

int64_t ElementCount(const proto::TensorRef& tensor) {
  int64_t count = 1;
  for (int64_t size : tensor.sizes()) count *= size;
  return count;
}

}  // namespace openreg::daemon
