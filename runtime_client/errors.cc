// Error names and the per-thread last error (runtime.h). The names and
// codes come from the one error table (data_plane/error_codes.h).
#include "data_plane/error_codes.h"
#include "openreg/runtime.h"
#include "runtime_client/thread_state.h"

namespace openreg {
namespace {

// Error crosses processes as proto::ErrorCode: the values must agree.
constexpr bool Same(Error error, proto::ErrorCode code) {
  return static_cast<int>(error) == static_cast<int>(code);
}
static_assert(Same(Error::kSuccess, proto::OK));
static_assert(Same(Error::kInvalidValue, proto::INVALID_VALUE));
static_assert(Same(Error::kInvalidDevice, proto::INVALID_DEVICE));
static_assert(Same(Error::kOutOfMemory, proto::OUT_OF_MEMORY));
static_assert(Same(Error::kNotReady, proto::NOT_READY));
static_assert(Same(Error::kDaemonUnavailable, proto::DAEMON_UNAVAILABLE));
static_assert(Same(Error::kDeviceLost, proto::DEVICE_LOST));
static_assert(Same(Error::kVersionMismatch, proto::VERSION_MISMATCH));
static_assert(Same(Error::kKernelFailure, proto::KERNEL_FAILURE));
static_assert(Same(Error::kInvalidHandle, proto::INVALID_HANDLE));
static_assert(Same(Error::kPermissionDenied, proto::PERMISSION_DENIED));
static_assert(Same(Error::kResourceExhausted, proto::RESOURCE_EXHAUSTED));
static_assert(Same(Error::kInternal, proto::INTERNAL));
static_assert(Same(Error::kKernelIndexError, proto::KERNEL_INDEX_ERROR));
static_assert(Same(Error::kKernelValueError, proto::KERNEL_VALUE_ERROR));
static_assert(Same(Error::kKernelTypeError, proto::KERNEL_TYPE_ERROR));
static_assert(Same(Error::kKernelNotImplementedError,
                   proto::KERNEL_NOT_IMPLEMENTED_ERROR));
static_assert(Same(Error::kKernelLinAlgError, proto::KERNEL_LINALG_ERROR));
static_assert(Same(Error::kSyncTimeout, proto::SYNC_TIMEOUT));
static_assert(Same(Error::kIllegalAddress, proto::ILLEGAL_ADDRESS));
static_assert(Same(Error::kEccUncorrectable, proto::ECC_UNCORRECTABLE));
static_assert(Same(Error::kDeviceFault, proto::DEVICE_FAULT));
static_assert(Same(Error::kCopyFailure, proto::COPY_FAILURE));
static_assert(Same(Error::kCollectiveFailure, proto::COLLECTIVE_FAILURE));
static_assert(Same(Error::kStreamCaptureUnsupported,
                   proto::STREAM_CAPTURE_UNSUPPORTED));
static_assert(Same(Error::kStreamCaptureInvalidated,
                   proto::STREAM_CAPTURE_INVALIDATED));
static_assert(static_cast<int>(Error::kStreamCaptureInvalidated) + 1 ==
                  proto::ErrorCode_ARRAYSIZE,
              "runtime.h's Error must list every proto::ErrorCode");

}  // namespace

const char* ErrorName(Error error) {
  return ErrorInfo(static_cast<int>(error)).name;
}

Error GetLastError() { return client::TakeLastError(); }

Error PeekAtLastError() { return client::PeekLastError(); }

std::string GetLastErrorMessage() { return client::LastErrorMessage(); }

}  // namespace openreg
