// Internal errors are absl::Status values that carry an openreg::Error as a
// payload: several openreg codes share one canonical absl code (out of
// memory and "no free stream slot" are both kResourceExhausted), and the
// public API must return the exact one.
#ifndef OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_
#define OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "openreg/runtime.h"
#include "protos/control.pb.h"

namespace openreg {

// A status whose ErrorOf() is `code`; `code` must not be kSuccess.
absl::Status MakeError(Error code, absl::string_view message);

// The openreg code of `status`: its payload, else kInternal for any error
// created without one (a bug, but never reported as success).
Error ErrorOf(const absl::Status& status);

// kInvalidValue for a null output or input argument of `function`.
absl::Status NullArgumentError(absl::string_view function,
                               absl::string_view argument);

// "0x0f00000000001000": how addresses appear in messages.
std::string FormatAddress(uint64_t address);

// A reply's status from the daemon. Messages get the "openreg: " prefix
// every client message has, unless the daemon already wrote it.
absl::Status StatusFromProto(const proto::Status& status);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_
