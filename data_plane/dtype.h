// Element sizes of c10::ScalarType values as they travel in the wire
// format (TensorRef.dtype, HostTensor.dtype).
// Kept free of c10 headers so that validating a tensor does not pull ATen
// into every translation unit; tests/cpp/dtype_test.cc checks the table
// against c10::elementSize.
#ifndef OPENREG_DATA_PLANE_DTYPE_H_
#define OPENREG_DATA_PLANE_DTYPE_H_

#include <cstdint>

namespace openreg {

// One past the largest c10::ScalarType value the daemon knows
// (Float4_e2m1fn_x2 = 45 in torch 2.13).
inline constexpr int kNumKnownDtypes = 46;

// Bytes per element of `dtype`, or 0 when it is not a known ScalarType.
int64_t DtypeElementSize(int32_t dtype);

// c10's name of `dtype` ("Float", "BFloat16", ...), or "dtype <n>".
const char* DtypeName(int32_t dtype);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_DTYPE_H_
