#include "torch_backend/ignored_error.h"

#include <c10/util/Exception.h>

#include <string>

namespace openreg::torch_backend {

Error IgnoreError(Error error, const char* reason) {
  if (error == Error::kSuccess) return error;
  const std::string message = GetLastErrorMessage();
  GetLastError();  // answered here
  if (error == Error::kInternal) {
    TORCH_WARN_ONCE("openreg: an internal error was ignored (", reason,
                    "): ", message);
  }
  return error;
}

}  // namespace openreg::torch_backend
