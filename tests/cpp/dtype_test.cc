// The daemon's dtype table must match c10 exactly; this is the only test
// that compiles c10 headers.
#include "data_plane/dtype.h"

#include <c10/core/ScalarType.h>

#include "gtest/gtest.h"

namespace openreg {
namespace {

TEST(DtypeTest, ElementSizesMatchC10) {
  for (int dtype = 0; dtype < kNumKnownDtypes; ++dtype) {
    const auto scalar_type = static_cast<c10::ScalarType>(dtype);
    EXPECT_EQ(DtypeElementSize(dtype),
              static_cast<int64_t>(c10::elementSize(scalar_type)))
        << c10::toString(scalar_type);
  }
}

TEST(DtypeTest, TableCoversEveryC10ScalarType) {
  // Undefined follows the last real type.
  EXPECT_EQ(static_cast<int>(c10::ScalarType::Undefined), kNumKnownDtypes);
}

TEST(DtypeTest, UnknownValuesHaveNoSize) {
  EXPECT_EQ(DtypeElementSize(-1), 0);
  EXPECT_EQ(DtypeElementSize(kNumKnownDtypes), 0);
  EXPECT_EQ(DtypeElementSize(1 << 30), 0);
}

}  // namespace
}  // namespace openreg
