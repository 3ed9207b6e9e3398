#include "torch_backend/runtime_error.h"

#include <c10/util/Exception.h>

#include <string>

#include "data_plane/error_codes.h"

namespace openreg::torch_backend {

void ThrowRuntimeError(Error error, const char* call) {
  std::string message = GetLastErrorMessage();
  GetLastError();  // consumed: reported through the exception
  if (message.empty()) {
    message = std::string("openreg: ") + ErrorName(error) + " in " + call;
  }
  // The exception class is the error table's (data_plane/error_codes.h).
  switch (ErrorInfo(static_cast<int>(error)).python_exception) {
    case PythonException::kOutOfMemoryError:
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    case PythonException::kValueError:
      TORCH_CHECK_VALUE(false, message);
    case PythonException::kIndexError:
      TORCH_CHECK_INDEX(false, message);
    case PythonException::kTypeError:
      TORCH_CHECK_TYPE(false, message);
    case PythonException::kNotImplementedError:
      TORCH_CHECK_NOT_IMPLEMENTED(false, message);
    case PythonException::kLinAlgError:
      TORCH_CHECK_WITH(LinAlgError, false, message);
    case PythonException::kNone:
    case PythonException::kRuntimeError:
      break;
  }
  TORCH_CHECK(false, message);
}

}  // namespace openreg::torch_backend
