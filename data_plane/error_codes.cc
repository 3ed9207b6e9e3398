#include "data_plane/error_codes.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/types/optional.h"

namespace openreg {
namespace {

using SC = absl::StatusCode;
using PE = PythonException;

// Indexed by proto::ErrorCode value.
constexpr ErrorCodeInfo kErrorTable[] = {
    {proto::OK, SC::kOk, "success", PE::kNone},
    {proto::INVALID_VALUE, SC::kInvalidArgument, "invalid value",
     PE::kValueError},
    {proto::INVALID_DEVICE, SC::kInvalidArgument, "invalid device",
     PE::kRuntimeError},
    {proto::OUT_OF_MEMORY, SC::kResourceExhausted, "out of memory",
     PE::kOutOfMemoryError},
    // A query's answer ("not yet"), never recorded as a failure.
    {proto::NOT_READY, SC::kUnavailable, "not ready", PE::kRuntimeError},
    {proto::DAEMON_UNAVAILABLE, SC::kUnavailable, "daemon unavailable",
     PE::kRuntimeError},
    {proto::DEVICE_LOST, SC::kUnavailable, "device lost", PE::kRuntimeError},
    {proto::VERSION_MISMATCH, SC::kFailedPrecondition, "version mismatch",
     PE::kRuntimeError},
    {proto::KERNEL_FAILURE, SC::kAborted, "kernel failure", PE::kRuntimeError},
    {proto::INVALID_HANDLE, SC::kNotFound, "invalid handle", PE::kRuntimeError},
    {proto::PERMISSION_DENIED, SC::kPermissionDenied, "permission denied",
     PE::kRuntimeError},
    {proto::RESOURCE_EXHAUSTED, SC::kResourceExhausted, "resource exhausted",
     PE::kRuntimeError},
    {proto::INTERNAL, SC::kInternal, "internal error", PE::kRuntimeError},
    {proto::KERNEL_INDEX_ERROR, SC::kOutOfRange, "kernel index error",
     PE::kIndexError},
    {proto::KERNEL_VALUE_ERROR, SC::kInvalidArgument, "kernel value error",
     PE::kValueError},
    {proto::KERNEL_TYPE_ERROR, SC::kInvalidArgument, "kernel type error",
     PE::kTypeError},
    {proto::KERNEL_NOT_IMPLEMENTED_ERROR, SC::kUnimplemented,
     "kernel not implemented", PE::kNotImplementedError},
    {proto::KERNEL_LINALG_ERROR, SC::kAborted, "kernel linear algebra error",
     PE::kLinAlgError},
    {proto::SYNC_TIMEOUT, SC::kDeadlineExceeded, "synchronization timed out",
     PE::kRuntimeError},
    {proto::ILLEGAL_ADDRESS, SC::kDataLoss, "illegal address",
     PE::kRuntimeError},
    {proto::ECC_UNCORRECTABLE, SC::kDataLoss, "uncorrectable ECC error",
     PE::kRuntimeError},
    {proto::DEVICE_FAULT, SC::kUnavailable, "device fault", PE::kRuntimeError},
    {proto::COPY_FAILURE, SC::kAborted, "copy failure", PE::kRuntimeError},
    {proto::COLLECTIVE_FAILURE, SC::kAborted, "collective failure",
     PE::kDistBackendError},
    // CUDA's texts (cudaGetErrorString), which PyTorch users match.
    {proto::STREAM_CAPTURE_UNSUPPORTED, SC::kFailedPrecondition,
     "operation not permitted when stream is capturing", PE::kRuntimeError},
    {proto::STREAM_CAPTURE_INVALIDATED, SC::kFailedPrecondition,
     "operation failed due to a previous error during capture",
     PE::kRuntimeError},
};
constexpr int kTableSize = sizeof(kErrorTable) / sizeof(kErrorTable[0]);

constexpr bool TableIsIndexedByCode() {
  for (int i = 0; i < kTableSize; ++i) {
    if (static_cast<int>(kErrorTable[i].code) != i) return false;
  }
  return true;
}
static_assert(TableIsIndexedByCode(), "kErrorTable[i].code must equal i");
static_assert(kTableSize == proto::ErrorCode_ARRAYSIZE,
              "every proto::ErrorCode needs an entry in kErrorTable");

constexpr char kErrorCodePayload[] = "type.openreg/openreg.proto.ErrorCode";

// Statuses made without MakeError (absl helpers, library calls).
proto::ErrorCode CodeForUntaggedStatus(absl::StatusCode code) {
  switch (code) {
    case SC::kOk:
      return proto::OK;
    case SC::kInvalidArgument:
    case SC::kOutOfRange:
    case SC::kFailedPrecondition:
      return proto::INVALID_VALUE;
    case SC::kNotFound:
      return proto::INVALID_HANDLE;
    case SC::kResourceExhausted:
      return proto::RESOURCE_EXHAUSTED;
    case SC::kPermissionDenied:
    case SC::kUnauthenticated:
      return proto::PERMISSION_DENIED;
    default:
      return proto::INTERNAL;
  }
}

}  // namespace

const ErrorCodeInfo& ErrorInfo(int wire_value) {
  if (wire_value < 0 || wire_value >= kTableSize) {
    return kErrorTable[proto::INTERNAL];
  }
  return kErrorTable[wire_value];
}

const ErrorCodeInfo& ErrorInfo(proto::ErrorCode code) {
  return ErrorInfo(static_cast<int>(code));
}

absl::Status MakeError(proto::ErrorCode code, absl::string_view message) {
  if (code == proto::OK || !proto::ErrorCode_IsValid(code)) {
    code = proto::INTERNAL;
  }
  absl::Status status(ErrorInfo(code).status_code, message);
  status.SetPayload(kErrorCodePayload,
                    absl::Cord(std::to_string(static_cast<int>(code))));
  return status;
}

proto::ErrorCode ErrorCodeOf(const absl::Status& status) {
  if (status.ok()) return proto::OK;
  const absl::optional<absl::Cord> payload =
      status.GetPayload(kErrorCodePayload);
  int value = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &value) &&
      proto::ErrorCode_IsValid(value) && value != proto::OK) {
    return static_cast<proto::ErrorCode>(value);
  }
  return CodeForUntaggedStatus(status.code());
}

const char* PythonExceptionName(PythonException exception) {
  switch (exception) {
    case PythonException::kNone:
      return "(none)";
    case PythonException::kRuntimeError:
      return "RuntimeError";
    case PythonException::kValueError:
      return "ValueError";
    case PythonException::kOutOfMemoryError:
      return "torch.OutOfMemoryError";
    case PythonException::kIndexError:
      return "IndexError";
    case PythonException::kTypeError:
      return "TypeError";
    case PythonException::kNotImplementedError:
      return "NotImplementedError";
    case PythonException::kLinAlgError:
      return "torch.linalg.LinAlgError";
    case PythonException::kDistBackendError:
      return "torch.distributed.DistBackendError";
  }
  return "RuntimeError";
}

}  // namespace openreg
