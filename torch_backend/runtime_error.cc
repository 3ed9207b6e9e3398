#include "torch_backend/runtime_error.h"

#include <c10/util/Exception.h>

#include <string>

namespace openreg::torch_backend {

void ThrowRuntimeError(Error error, const char* call) {
  std::string message = GetLastErrorMessage();
  GetLastError();  // consumed: reported through the exception
  if (message.empty()) {
    message = std::string("openreg: ") + ErrorName(error) + " in " + call;
  }
  switch (error) {
    case Error::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case Error::kInvalidValue:
      TORCH_CHECK_VALUE(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

}  // namespace openreg::torch_backend
