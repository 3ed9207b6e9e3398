// Runtime failures the backend answers itself instead of raising (a
// fallback value, nothing left to clean up), named with their reason at the
// call, as c10's C10_CUDA_IGNORE_ERROR does for CUDA. The thread's last
// error is cleared, so the failure cannot surface at an unrelated later
// call. A failure that means a bug (kInternal) is still reported, as a
// warning once per process: no error vanishes silently.
#ifndef OPENREG_TORCH_BACKEND_IGNORED_ERROR_H_
#define OPENREG_TORCH_BACKEND_IGNORED_ERROR_H_

#include "openreg/runtime.h"

namespace openreg::torch_backend {

// Answers the failure `error` (if any) for `reason`; returns `error`, so a
// caller can still branch on it.
Error IgnoreError(Error error, const char* reason) noexcept;

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_IGNORED_ERROR_H_
