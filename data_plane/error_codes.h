// The one table of openreg's errors. Every error that crosses a process
// boundary carries a proto::ErrorCode (protos/errors.proto); this table says,
// once for the daemon, the runtime client and the torch backend, what each
// code is called, which absl::StatusCode it travels as inside a process, and
// which Python exception PyTorch users see. The runtime API's Error enum
// (runtime_client/include/openreg/runtime.h) has the same values; its
// errors.cc static_asserts that, and tests/cpp/error_codes_test.cc checks
// that the table covers every code exactly once.
//
// Inside a process an error is an absl::Status made by MakeError(): the
// openreg code rides as a payload because several codes share one canonical
// absl code (out of memory and "no free stream slot" are both
// kResourceExhausted), and the exact one must reach the other side.
#ifndef OPENREG_DATA_PLANE_ERROR_CODES_H_
#define OPENREG_DATA_PLANE_ERROR_CODES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "protos/errors.pb.h"

namespace openreg {

// The exception class torch_backend raises for an error.
enum class PythonException {
  kNone,  // OK: nothing is raised
  kRuntimeError,
  kValueError,
  kOutOfMemoryError,  // torch.OutOfMemoryError
  kIndexError,
  kTypeError,
  kNotImplementedError,
  kLinAlgError,       // torch.linalg.LinAlgError
  kDistBackendError,  // torch.distributed.DistBackendError
};

struct ErrorCodeInfo {
  proto::ErrorCode code;
  absl::StatusCode status_code;
  const char* name;  // "out of memory": ErrorName() and messages
  PythonException python_exception;
};

// The entry of `code`; INTERNAL's for a value outside the enum.
const ErrorCodeInfo& ErrorInfo(proto::ErrorCode code);
// The entry of an error code read off the wire (an int of unknown origin).
const ErrorCodeInfo& ErrorInfo(int wire_value);

// A status whose ErrorCodeOf() is `code`; OK is not an error and becomes
// INTERNAL (a bug, but never reported as success).
absl::Status MakeError(proto::ErrorCode code, absl::string_view message);

// The code of `status`: its payload when it has one, else the code for a
// status made without one (kInvalidArgument -> INVALID_VALUE, ...).
proto::ErrorCode ErrorCodeOf(const absl::Status& status);

// "torch.OutOfMemoryError": how docs and messages name the class.
const char* PythonExceptionName(PythonException exception);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_ERROR_CODES_H_
