#include "runtime_client/status_util.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace openreg::client {

absl::Status MakeError(Error code, absl::string_view message) {
  return openreg::MakeError(static_cast<proto::ErrorCode>(code), message);
}

Error ErrorOf(const absl::Status& status) {
  return static_cast<Error>(ErrorCodeOf(status));
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
  const ErrorCodeInfo& info = ErrorInfo(static_cast<int>(status.code()));
  std::string message = status.message();
  if (message.empty()) {
    message = absl::StrCat("the daemon reported ", info.name);
  }
  if (!absl::StartsWith(message, "openreg")) {
    message = absl::StrCat("openreg: ", message);
  }
  return openreg::MakeError(info.code, message);
}

}  // namespace openreg::client
