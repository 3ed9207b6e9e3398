// Turns openreg runtime errors into the c10 exceptions PyTorch users expect,
// with the class the error table names (data_plane/error_codes.h): out of
// memory becomes torch.OutOfMemoryError, an invalid value a ValueError,
// everything else a RuntimeError carrying the daemon's message.
#ifndef OPENREG_TORCH_BACKEND_RUNTIME_ERROR_H_
#define OPENREG_TORCH_BACKEND_RUNTIME_ERROR_H_

#include "openreg/runtime.h"

namespace openreg::torch_backend {

// Throws the c10 exception for `error` with the thread's last error message.
[[noreturn]] void ThrowRuntimeError(Error error, const char* call);

inline void CheckRuntime(Error error, const char* call) {
  if (error != Error::kSuccess) ThrowRuntimeError(error, call);
}

}  // namespace openreg::torch_backend

#define OPENREG_CHECK(expr) \
  ::openreg::torch_backend::CheckRuntime((expr), #expr)

#endif  // OPENREG_TORCH_BACKEND_RUNTIME_ERROR_H_
