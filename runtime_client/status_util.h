// Internal errors are absl::Status values made with the one error table
// (data_plane/error_codes.h); the public API returns their code as an
// openreg::Error, whose values equal proto::ErrorCode.
#ifndef OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_
#define OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data_plane/error_codes.h"
#include "openreg/runtime.h"
#include "protos/control.pb.h"

namespace openreg::client {

// A status whose ErrorOf() is `code`; kSuccess becomes kInternal.
absl::Status MakeError(Error code, absl::string_view message);

// The openreg code of `status` (see ErrorCodeOf in data_plane).
Error ErrorOf(const absl::Status& status);

// kInvalidValue for a null output or input argument of `function`.
absl::Status NullArgumentError(absl::string_view function,
                               absl::string_view argument);

// "0x0f00000000001000": how addresses appear in messages.
std::string FormatAddress(uint64_t address);

// A reply's status from the daemon. Messages get the "openreg: " prefix
// every client message has, unless the daemon already wrote it.
absl::Status StatusFromProto(const proto::Status& status);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_STATUS_UTIL_H_
