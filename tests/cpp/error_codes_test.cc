// The one error table (data_plane/error_codes.h) covers every wire code
// exactly once, and a code survives the trip through an absl::Status.
#include "data_plane/error_codes.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace openreg {
namespace {

TEST(ErrorCodesTest, EveryWireCodeHasOneEntryWithAName) {
  const google::protobuf::EnumDescriptor* codes = proto::ErrorCode_descriptor();
  std::set<std::string> names;
  for (int i = 0; i < codes->value_count(); ++i) {
    const auto code = static_cast<proto::ErrorCode>(codes->value(i)->number());
    const ErrorCodeInfo& info = ErrorInfo(code);
    EXPECT_EQ(info.code, code) << codes->value(i)->name();
    EXPECT_NE(std::string(info.name), "") << codes->value(i)->name();
    EXPECT_TRUE(names.insert(info.name).second)
        << "two codes are called " << info.name;
  }
}

TEST(ErrorCodesTest, OnlyOkIsSuccess) {
  const google::protobuf::EnumDescriptor* codes = proto::ErrorCode_descriptor();
  for (int i = 0; i < codes->value_count(); ++i) {
    const auto code = static_cast<proto::ErrorCode>(codes->value(i)->number());
    const ErrorCodeInfo& info = ErrorInfo(code);
    EXPECT_EQ(info.status_code == absl::StatusCode::kOk, code == proto::OK);
    EXPECT_EQ(info.python_exception == PythonException::kNone,
              code == proto::OK);
  }
}

TEST(ErrorCodesTest, MakeErrorKeepsTheExactCodeAcrossSharedCanonicalCodes) {
  // Both are kResourceExhausted in absl terms; the payload tells them apart.
  const absl::Status oom = MakeError(proto::OUT_OF_MEMORY, "oom");
  const absl::Status slots = MakeError(proto::RESOURCE_EXHAUSTED, "slots");
  EXPECT_EQ(oom.code(), slots.code());
  EXPECT_EQ(ErrorCodeOf(oom), proto::OUT_OF_MEMORY);
  EXPECT_EQ(ErrorCodeOf(slots), proto::RESOURCE_EXHAUSTED);
  EXPECT_EQ(oom.message(), "oom");
  for (int value = 1; value < proto::ErrorCode_ARRAYSIZE; ++value) {
    const auto code = static_cast<proto::ErrorCode>(value);
    EXPECT_EQ(ErrorCodeOf(MakeError(code, "x")), code) << value;
    EXPECT_EQ(MakeError(code, "x").code(), ErrorInfo(code).status_code);
  }
}

TEST(ErrorCodesTest, NotReadyIsUnavailableOnBothSides) {
  // The daemon and the client once disagreed on this one.
  EXPECT_EQ(ErrorInfo(proto::NOT_READY).status_code,
            absl::StatusCode::kUnavailable);
}

TEST(ErrorCodesTest, OkIsNeverMadeIntoAnError) {
  const absl::Status status = MakeError(proto::OK, "bug");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(ErrorCodeOf(status), proto::INTERNAL);
}

TEST(ErrorCodesTest, UntaggedStatusesMapByCanonicalCode) {
  EXPECT_EQ(ErrorCodeOf(absl::OkStatus()), proto::OK);
  EXPECT_EQ(ErrorCodeOf(absl::InvalidArgumentError("x")), proto::INVALID_VALUE);
  EXPECT_EQ(ErrorCodeOf(absl::OutOfRangeError("x")), proto::INVALID_VALUE);
  EXPECT_EQ(ErrorCodeOf(absl::NotFoundError("x")), proto::INVALID_HANDLE);
  EXPECT_EQ(ErrorCodeOf(absl::PermissionDeniedError("x")),
            proto::PERMISSION_DENIED);
  EXPECT_EQ(ErrorCodeOf(absl::ResourceExhaustedError("x")),
            proto::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ErrorCodeOf(absl::DataLossError("x")), proto::INTERNAL);
}

TEST(ErrorCodesTest, WireValuesOutsideTheEnumAreInternal) {
  EXPECT_EQ(ErrorInfo(-1).code, proto::INTERNAL);
  EXPECT_EQ(ErrorInfo(proto::ErrorCode_ARRAYSIZE).code, proto::INTERNAL);
  EXPECT_EQ(ErrorInfo(1 << 30).code, proto::INTERNAL);
}

TEST(ErrorCodesTest, PythonClassesOfTheUserVisibleCodes) {
  EXPECT_EQ(ErrorInfo(proto::OUT_OF_MEMORY).python_exception,
            PythonException::kOutOfMemoryError);
  EXPECT_EQ(ErrorInfo(proto::INVALID_VALUE).python_exception,
            PythonException::kValueError);
  EXPECT_EQ(ErrorInfo(proto::DEVICE_LOST).python_exception,
            PythonException::kRuntimeError);
  EXPECT_STREQ(PythonExceptionName(PythonException::kOutOfMemoryError),
               "torch.OutOfMemoryError");
}

}  // namespace
}  // namespace openreg
