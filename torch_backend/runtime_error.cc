#include "torch_backend/runtime_error.h"

#include <string>

#include "data_plane/error_codes.h"
#include "op_codec/error_classes.h"

namespace openreg::torch_backend {

void ThrowRuntimeError(Error error, const char* call) {
  std::string message = GetLastErrorMessage();
  GetLastError();  // consumed: reported through the exception
  if (message.empty()) {
    message = std::string("openreg: ") + ErrorName(error) + " in " + call;
  }
  // The exception class is the error table's (data_plane/error_codes.h),
  // thrown as its c10 class (op_codec/error_classes.h).
  op_codec::ThrowC10Error(ErrorInfo(static_cast<int>(error)).code, message);
}

}  // namespace openreg::torch_backend
