#include "runtime_client/status_util.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"

namespace openreg {
namespace {

constexpr absl::string_view kErrorPayloadUrl = "type.openreg/openreg.Error";

// Closest canonical code, so that absl-aware callers (logging, tests) still
// see something sensible.
absl::StatusCode CanonicalCode(Error code) {
  switch (code) {
    case Error::kSuccess:
      return absl::StatusCode::kOk;
    case Error::kInvalidValue:
    case Error::kInvalidDevice:
      return absl::StatusCode::kInvalidArgument;
    case Error::kOutOfMemory:
    case Error::kResourceExhausted:
      return absl::StatusCode::kResourceExhausted;
    case Error::kNotReady:
    case Error::kVersionMismatch:
      return absl::StatusCode::kFailedPrecondition;
    case Error::kDaemonUnavailable:
    case Error::kDeviceLost:
      return absl::StatusCode::kUnavailable;
    case Error::kKernelFailure:
      return absl::StatusCode::kAborted;
    case Error::kInvalidHandle:
      return absl::StatusCode::kNotFound;
    case Error::kPermissionDenied:
      return absl::StatusCode::kPermissionDenied;
    case Error::kInternal:
      return absl::StatusCode::kInternal;
  }
  return absl::StatusCode::kInternal;
}

bool IsKnownError(int value) {
  return value > static_cast<int>(Error::kSuccess) &&
         value <= static_cast<int>(Error::kInternal);
}

}  // namespace

absl::Status MakeError(Error code, absl::string_view message) {
  if (code == Error::kSuccess) code = Error::kInternal;
  absl::Status status(CanonicalCode(code), message);
  status.SetPayload(kErrorPayloadUrl,
                    absl::Cord(absl::StrCat(static_cast<int>(code))));
  return status;
}

Error ErrorOf(const absl::Status& status) {
  if (status.ok()) return Error::kSuccess;
  const absl::optional<absl::Cord> payload =
      status.GetPayload(kErrorPayloadUrl);
  int value = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &value) &&
      IsKnownError(value)) {
    return static_cast<Error>(value);
  }
  return Error::kInternal;
}

absl::Status NullArgumentError(absl::string_view function,
                               absl::string_view argument) {
  return MakeError(Error::kInvalidValue,
                   absl::StrCat("openreg: ", function, ": `", argument,
                                "` must not be null"));
}

std::string FormatAddress(uint64_t address) {
  return absl::StrCat("0x", absl::Hex(address, absl::kZeroPad16));
}

absl::Status StatusFromProto(const proto::Status& status) {
  if (status.code() == proto::OK) return absl::OkStatus();
  const int value = static_cast<int>(status.code());
  const Error code =
      IsKnownError(value) ? static_cast<Error>(value) : Error::kInternal;
  std::string message = status.message();
  if (message.empty()) {
    message = absl::StrCat("the daemon reported ", ErrorName(code));
  }
  if (!absl::StartsWith(message, "openreg")) {
    message = absl::StrCat("openreg: ", message);
  }
  return MakeError(code, message);
}

}  // namespace openreg
