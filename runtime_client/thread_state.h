// Per-thread state of the runtime API, as in CUDA: the current device and
// the last error with its message. Thread-local so that threads never see
// each other's errors and the hot path takes no lock.
#ifndef OPENREG_RUNTIME_CLIENT_THREAD_STATE_H_
#define OPENREG_RUNTIME_CLIENT_THREAD_STATE_H_

#include <string>

#include "absl/status/status.h"
#include "openreg/runtime.h"

namespace openreg::client {

int CurrentDevice();
void SetCurrentDevice(int device);

// Converts an internal status into the public Error, remembering failures
// as this thread's last error. kNotReady is a query answer, not a failure,
// and is not remembered (cudaErrorNotReady behaves the same way).
Error ReturnStatus(const absl::Status& status);

Error TakeLastError();
Error PeekLastError();
std::string LastErrorMessage();

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_THREAD_STATE_H_
