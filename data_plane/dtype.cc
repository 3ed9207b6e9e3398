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

}  // namespace

int64_t DtypeElementSize(int32_t dtype) {
  if (dtype < 0 || dtype >= kNumKnownDtypes) return 0;
  return kElementSizes[dtype];
}

}  // namespace openreg
