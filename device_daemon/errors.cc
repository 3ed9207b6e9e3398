#include "device_daemon/errors.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/types/optional.h"

namespace openreg {
namespace {

constexpr char kErrorCodePayload[] = "openreg.proto.ErrorCode";

absl::StatusCode CanonicalCodeFor(proto::ErrorCode code) {
  switch (code) {
    case proto::OK:
      return absl::StatusCode::kOk;
    case proto::INVALID_VALUE:
    case proto::INVALID_DEVICE:
      return absl::StatusCode::kInvalidArgument;
    case proto::OUT_OF_MEMORY:
    case proto::RESOURCE_EXHAUSTED:
      return absl::StatusCode::kResourceExhausted;
    case proto::NOT_READY:
      return absl::StatusCode::kUnavailable;
    case proto::DAEMON_UNAVAILABLE:
    case proto::DEVICE_LOST:
      return absl::StatusCode::kUnavailable;
    case proto::VERSION_MISMATCH:
      return absl::StatusCode::kFailedPrecondition;
    case proto::KERNEL_FAILURE:
      return absl::StatusCode::kAborted;
    case proto::INVALID_HANDLE:
      return absl::StatusCode::kNotFound;
    case proto::PERMISSION_DENIED:
      return absl::StatusCode::kPermissionDenied;
    default:
      return absl::StatusCode::kInternal;
  }
}

proto::ErrorCode ErrorCodeForCanonical(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return proto::OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return proto::INVALID_VALUE;
    case absl::StatusCode::kNotFound:
      return proto::INVALID_HANDLE;
    case absl::StatusCode::kResourceExhausted:
      return proto::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return proto::PERMISSION_DENIED;
    default:
      return proto::INTERNAL;
  }
}

}  // namespace

absl::Status MakeError(proto::ErrorCode code, absl::string_view message) {
  absl::Status status(CanonicalCodeFor(code), message);
  status.SetPayload(kErrorCodePayload, absl::Cord(std::to_string(code)));
  return status;
}

proto::ErrorCode ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return proto::OK;
  absl::optional<absl::Cord> payload = status.GetPayload(kErrorCodePayload);
  int value = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &value) &&
      proto::ErrorCode_IsValid(value) && value != proto::OK) {
    return static_cast<proto::ErrorCode>(value);
  }
  return ErrorCodeForCanonical(status.code());
}

void ToProtoStatus(const absl::Status& status, proto::Status* out) {
  out->set_code(ErrorCodeOf(status));
  out->set_message(std::string(status.message()));
}

}  // namespace openreg
