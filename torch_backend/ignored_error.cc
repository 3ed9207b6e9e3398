#include "torch_backend/ignored_error.h"

#include <c10/util/Exception.h>

#include <string>

namespace openreg::torch_backend {

Error IgnoreError(Error error, const char* reason) noexcept {
  if (error == Error::kSuccess) return error;
  // Cleared only when this failure set it: an earlier, unrelated error (and
  // kNotReady, which is never recorded) stays.
  const bool recorded = PeekAtLastError() == error;
  if (error == Error::kInternal) {
    const std::string message =
        recorded ? GetLastErrorMessage() : std::string(ErrorName(error));
    try {
      TORCH_WARN_ONCE("openreg: an internal error was ignored (", reason,
                      "): ", message, "; please report this.");
    } catch (...) {
      // A warning handler that throws must not escape a destructor.
    }
  }
  if (recorded) GetLastError();
  return error;
}

}  // namespace openreg::torch_backend
