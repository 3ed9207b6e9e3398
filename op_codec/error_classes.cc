#include "op_codec/error_classes.h"

#include <cstdint>
#include <string>

#include "data_plane/error_codes.h"

namespace openreg::op_codec {
namespace {

// One c10 error class and the code a kernel's error of that class travels
// as; the class's Python exception is that code's in the error table.
struct ErrorClass {
  proto::ErrorCode code;
  bool (*is_instance)(const c10::Error& error);
  void (*raise)(const std::string& message);  // throws
};

template <typename C10Error>
constexpr ErrorClass Class(proto::ErrorCode code) {
  return {code,
          [](const c10::Error& error) {
            return dynamic_cast<const C10Error*>(&error) != nullptr;
          },
          [](const std::string& message) {
            // What TORCH_CHECK_WITH(C10Error, false, message) throws.
            throw C10Error(
                {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
          }};
}

// None of these classes derives from another. Any other c10::Error is
// Python's RuntimeError and travels as KERNEL_FAILURE.
constexpr ErrorClass kErrorClasses[] = {
    Class<c10::IndexError>(proto::KERNEL_INDEX_ERROR),
    Class<c10::ValueError>(proto::KERNEL_VALUE_ERROR),
    Class<c10::TypeError>(proto::KERNEL_TYPE_ERROR),
    Class<c10::NotImplementedError>(proto::KERNEL_NOT_IMPLEMENTED_ERROR),
    Class<c10::LinAlgError>(proto::KERNEL_LINALG_ERROR),
    Class<c10::OutOfMemoryError>(proto::OUT_OF_MEMORY),
    Class<c10::DistBackendError>(proto::COLLECTIVE_FAILURE),
};

}  // namespace

proto::ErrorCode CodeOfKernelError(const c10::Error& error) {
  for (const ErrorClass& error_class : kErrorClasses) {
    if (error_class.is_instance(error)) return error_class.code;
  }
  return proto::KERNEL_FAILURE;
}

void ThrowC10Error(proto::ErrorCode code, const std::string& message) {
  const PythonException exception = ErrorInfo(code).python_exception;
  for (const ErrorClass& error_class : kErrorClasses) {
    if (ErrorInfo(error_class.code).python_exception == exception) {
      error_class.raise(message);
    }
  }
  TORCH_CHECK(false, message);  // RuntimeError (or OK, which has no class)
}

}  // namespace openreg::op_codec
