#include "data_plane/dtype.h"

namespace openreg {
namespace {

// Indexed by c10::ScalarType (see torch/headeronly/core/ScalarType.h).
constexpr int8_t kElementSizes[kNumKnownDtypes] = {
    1,   // Byte
    1,   // Char
    2,   // Short
    4,   // Int
    8,   // Long
    2,   // Half
    4,   // Float
    8,   // Double
    4,   // ComplexHalf
    8,   // ComplexFloat
    16,  // ComplexDouble
    1,   // Bool
    1,   // QInt8
    1,   // QUInt8
    4,   // QInt32
    2,   // BFloat16
    1,   // QUInt4x2
    1,   // QUInt2x4
    1,   // Bits1x8
    1,   // Bits2x4
    1,   // Bits4x2
    1,   // Bits8
    2,   // Bits16
    1,   // Float8_e5m2
    1,   // Float8_e4m3fn
    1,   // Float8_e5m2fnuz
    1,   // Float8_e4m3fnuz
    2,   // UInt16
    4,   // UInt32
    8,   // UInt64
    1,   // UInt1
    1,   // UInt2
    1,   // UInt3
    1,   // UInt4
    1,   // UInt5
    1,   // UInt6
    1,   // UInt7
    1,   // Int1
    1,   // Int2
    1,   // Int3
    1,   // Int4
    1,   // Int5
    1,   // Int6
    1,   // Int7
    1,   // Float8_e8m0fnu
    1,   // Float4_e2m1fn_x2
};

constexpr const char* kNames[kNumKnownDtypes] = {
    "Byte",
    "Char",
    "Short",
    "Int",
    "Long",
    "Half",
    "Float",
    "Double",
    "ComplexHalf",
    "ComplexFloat",
    "ComplexDouble",
    "Bool",
    "QInt8",
    "QUInt8",
    "QInt32",
    "BFloat16",
    "QUInt4x2",
    "QUInt2x4",
    "Bits1x8",
    "Bits2x4",
    "Bits4x2",
    "Bits8",
    "Bits16",
    "Float8_e5m2",
    "Float8_e4m3fn",
    "Float8_e5m2fnuz",
    "Float8_e4m3fnuz",
    "UInt16",
    "UInt32",
    "UInt64",
    "UInt1",
    "UInt2",
    "UInt3",
    "UInt4",
    "UInt5",
    "UInt6",
    "UInt7",
    "Int1",
    "Int2",
    "Int3",
    "Int4",
    "Int5",
    "Int6",
    "Int7",
    "Float8_e8m0fnu",
    "Float4_e2m1fn_x2",
};

}  // namespace

int64_t DtypeElementSize(int32_t dtype) {
  if (dtype < 0 || dtype >= kNumKnownDtypes) return 0;
  return kElementSizes[dtype];
}

const char* DtypeName(int32_t dtype) {
  if (dtype < 0 || dtype >= kNumKnownDtypes) return "unknown dtype";
  return kNames[dtype];
}

}  // namespace openreg
