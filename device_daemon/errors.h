// Errors inside the daemon are absl::Status values; the ones that reach a
// client carry a proto::ErrorCode. The code travels as a status payload so
// that, e.g., "out of memory" and "no free stream slot" (both
// kResourceExhausted in absl terms) stay distinct all the way to the reply.
#ifndef OPENREG_DEVICE_DAEMON_ERRORS_H_
#define OPENREG_DEVICE_DAEMON_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "protos/control.pb.h"

namespace openreg {

// A status whose ErrorCodeOf() is `code`. `code` must not be OK.
absl::Status MakeError(proto::ErrorCode code, absl::string_view message);

inline absl::Status InvalidValueError(absl::string_view message) {
  return MakeError(proto::INVALID_VALUE, message);
}
inline absl::Status InvalidDeviceError(absl::string_view message) {
  return MakeError(proto::INVALID_DEVICE, message);
}
inline absl::Status InvalidHandleError(absl::string_view message) {
  return MakeError(proto::INVALID_HANDLE, message);
}
inline absl::Status OutOfMemoryError(absl::string_view message) {
  return MakeError(proto::OUT_OF_MEMORY, message);
}
inline absl::Status KernelFailureError(absl::string_view message) {
  return MakeError(proto::KERNEL_FAILURE, message);
}

// The client-facing code of `status`: its payload when it has one, else a
// mapping of the canonical absl code (kDataLoss -> INTERNAL, ...).
proto::ErrorCode ErrorCodeOf(const absl::Status& status);

// Fills a reply's status field.
void ToProtoStatus(const absl::Status& status, proto::Status* out);

}  // namespace openreg

#endif  // OPENREG_DEVICE_DAEMON_ERRORS_H_
