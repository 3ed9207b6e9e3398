// The daemon's shorthands for errors of the one error table
// (data_plane/error_codes.h), and how a status fills a control reply.
#ifndef OPENREG_DEVICE_DAEMON_BASE_ERRORS_H_
#define OPENREG_DEVICE_DAEMON_BASE_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data_plane/error_codes.h"
#include "protos/control.pb.h"

namespace openreg::daemon {

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

// Fills a reply's status field.
void ToProtoStatus(const absl::Status& status, proto::Status* out);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_BASE_ERRORS_H_
