// The c10 error classes (op_codec/error_classes.h) agree with the one error
// table (data_plane/error_codes.h) in both directions: every code thrown as
// its c10 class maps back to a code of the same Python exception, and the
// codes a kernel's errors travel as come back unchanged.
#include "op_codec/error_classes.h"

#include <c10/util/Exception.h>

#include <string>
#include <typeinfo>

#include "data_plane/error_codes.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace openreg::op_codec {
namespace {

// What the client throws for `code`, classified as the daemon classifies
// a kernel's exception.
proto::ErrorCode RoundTrip(proto::ErrorCode code, std::string* message) {
  try {
    ThrowC10Error(code, "what the kernel said");
  } catch (const c10::Error& error) {
    *message = error.what_without_backtrace();
    return CodeOfKernelError(error);
  }
  ADD_FAILURE() << "ThrowC10Error returned for " << code;
  return proto::OK;
}

TEST(ErrorClassesTest, EveryCodeComesBackAsACodeOfTheSamePythonException) {
  const google::protobuf::EnumDescriptor* codes = proto::ErrorCode_descriptor();
  for (int i = 0; i < codes->value_count(); ++i) {
    const auto code = static_cast<proto::ErrorCode>(codes->value(i)->number());
    if (code == proto::OK) continue;  // not an error: has no class
    std::string message;
    const proto::ErrorCode back = RoundTrip(code, &message);
    EXPECT_EQ(ErrorInfo(back).python_exception,
              ErrorInfo(code).python_exception)
        << codes->value(i)->name() << " came back as "
        << proto::ErrorCode_Name(back);
    EXPECT_EQ(message, "what the kernel said") << codes->value(i)->name();
  }
}

TEST(ErrorClassesTest, TheCodesOfKernelErrorsComeBackUnchanged) {
  for (proto::ErrorCode code :
       {proto::KERNEL_INDEX_ERROR, proto::KERNEL_VALUE_ERROR,
        proto::KERNEL_TYPE_ERROR, proto::KERNEL_NOT_IMPLEMENTED_ERROR,
        proto::KERNEL_LINALG_ERROR, proto::OUT_OF_MEMORY,
        proto::KERNEL_FAILURE}) {
    std::string message;
    EXPECT_EQ(RoundTrip(code, &message), code) << proto::ErrorCode_Name(code);
  }
}

TEST(ErrorClassesTest, EachPythonExceptionIsThrownAsItsC10Class) {
  EXPECT_THROW(ThrowC10Error(proto::KERNEL_INDEX_ERROR, "m"), c10::IndexError);
  EXPECT_THROW(ThrowC10Error(proto::INVALID_VALUE, "m"), c10::ValueError);
  EXPECT_THROW(ThrowC10Error(proto::KERNEL_TYPE_ERROR, "m"), c10::TypeError);
  EXPECT_THROW(ThrowC10Error(proto::KERNEL_NOT_IMPLEMENTED_ERROR, "m"),
               c10::NotImplementedError);
  EXPECT_THROW(ThrowC10Error(proto::KERNEL_LINALG_ERROR, "m"),
               c10::LinAlgError);
  EXPECT_THROW(ThrowC10Error(proto::OUT_OF_MEMORY, "m"), c10::OutOfMemoryError);
  EXPECT_THROW(ThrowC10Error(proto::OK, "m"), c10::Error);
  try {
    ThrowC10Error(proto::DEVICE_LOST, "m");
  } catch (const c10::Error& error) {
    EXPECT_EQ(typeid(error), typeid(c10::Error));  // Python's RuntimeError
  }
}

TEST(ErrorClassesTest, OtherC10ErrorsAreKernelFailures) {
  const c10::EnforceFiniteError error({__func__, __FILE__, __LINE__}, "inf");
  EXPECT_EQ(CodeOfKernelError(error), proto::KERNEL_FAILURE);
}

}  // namespace
}  // namespace openreg::op_codec
