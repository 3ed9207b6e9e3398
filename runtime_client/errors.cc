// Error names and the per-thread last error (runtime.h).
#include "openreg/runtime.h"
#include "runtime_client/thread_state.h"

namespace openreg {

const char* ErrorName(Error error) {
  switch (error) {
    case Error::kSuccess:
      return "success";
    case Error::kInvalidValue:
      return "invalid value";
    case Error::kInvalidDevice:
      return "invalid device";
    case Error::kOutOfMemory:
      return "out of memory";
    case Error::kNotReady:
      return "not ready";
    case Error::kDaemonUnavailable:
      return "daemon unavailable";
    case Error::kDeviceLost:
      return "device lost";
    case Error::kVersionMismatch:
      return "version mismatch";
    case Error::kKernelFailure:
      return "kernel failure";
    case Error::kInvalidHandle:
      return "invalid handle";
    case Error::kPermissionDenied:
      return "permission denied";
    case Error::kResourceExhausted:
      return "resource exhausted";
    case Error::kInternal:
      return "internal error";
  }
  return "unknown error";
}

Error GetLastError() { return TakeLastError(); }

Error PeekAtLastError() { return PeekLastError(); }

std::string GetLastErrorMessage() { return LastErrorMessage(); }

}  // namespace openreg
